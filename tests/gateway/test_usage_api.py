"""GET /api/v1/usage/: the hourly rollup per hour or day, filtered, scoped per tenant, bad filters a 400
naming the parameter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from apps.gateway.models import UsageHour
from tests.factories import InferenceServiceFactory
from tests.gateway.conftest import issue

URL = "/api/v1/usage/"
DAY = datetime(2026, 11, 20, tzinfo=UTC)
pytestmark = pytest.mark.django_db


@pytest.fixture
def usage(tenant_a, tenant_b):
    chat = InferenceServiceFactory(tenant=tenant_a, name="chat")
    key, _ = issue(tenant_a, "app")
    other = InferenceServiceFactory(tenant=tenant_b, name="secret-b")

    def hour(tenant, at, *, service=chat, key_id=key.pk, model="chat", requests=10, prompt=100, p50=None):
        UsageHour.objects.create(hour=at, tenant=tenant, key_id=key_id, service_id=service.pk, model=model,
                                 requests=requests, errors=1, rate_limited=2, prompt_tokens=prompt,
                                 cached_tokens=5, completion_tokens=50, ttft_p50_ms=p50, ttft_p95_ms=p50)

    hour(tenant_a, DAY + timedelta(hours=3), p50=20.0)
    hour(tenant_a, DAY + timedelta(hours=3), model="sql-lora", requests=1, prompt=7)
    hour(tenant_a, DAY + timedelta(hours=9))
    hour(tenant_a, DAY + timedelta(days=1, hours=2))
    hour(tenant_b, DAY + timedelta(hours=3), service=other, key_id=None, requests=99)
    return {"chat": chat, "key": key, "other": other}


def get(client, **params):
    return client.get(URL, {"from": DAY.isoformat(), "to": (DAY + timedelta(days=2)).isoformat(), **params})


def test_hours_and_days_with_names_and_filters(api, owner_a, usage):
    client = api("owner_a")
    body = get(client).json()
    assert body["granularity"] == "hour" and body["from"].startswith("2026-11-20T00:00")
    rows = body["results"]
    assert [(r["period"][11:16], r["model"], r["requests"]) for r in rows] == [
        ("03:00", "chat", 10), ("03:00", "sql-lora", 1), ("09:00", "chat", 10), ("02:00", "chat", 10)]
    assert rows[0] | {"period": None} == {
        "period": None, "tenant": "alpha", "key_id": usage["key"].pk, "key": "app",
        "service_id": usage["chat"].pk, "service": "chat", "model": "chat", "batch": False, "requests": 10,
        "errors": 1,
        "rate_limited": 2, "prompt_tokens": 100, "cached_tokens": 5, "completion_tokens": 50,
        "ttft_p50_ms": 20.0, "ttft_p95_ms": 20.0}
    days = get(client, granularity="day").json()["results"]
    assert [(r["period"][:10], r["model"], r["requests"], r["prompt_tokens"]) for r in days] == [
        ("2026-11-20", "chat", 20, 200), ("2026-11-20", "sql-lora", 1, 7), ("2026-11-21", "chat", 10, 100)]
    assert days[0]["ttft_p50_ms"] is None
    assert [r["requests"] for r in get(client, model="sql-lora").json()["results"]] == [1]
    assert len(get(client, key=usage["key"].pk, service=usage["chat"].pk, tenant="alpha").json()["results"]) == 4
    assert get(client, key=usage["key"].pk + 1000).json()["results"] == []
    # `to` is exclusive: the hour starting at 09:00 is out of a range ending then.
    assert len(get(client, to=(DAY + timedelta(hours=9)).isoformat()).json()["results"]) == 2


def test_another_tenant_sees_nothing_and_staff_see_all(api, owner_a, member_b, staff, usage):
    bravo = get(api("member_b")).json()["results"]
    assert [(r["tenant"], r["requests"], r["key"]) for r in bravo] == [("bravo", 99, None)]
    assert get(api("member_b"), tenant="alpha").json()["results"] == []
    assert get(api("member_b"), service=usage["chat"].pk).json()["results"] == []
    everyone = get(api("staff")).json()["results"]
    assert sorted({r["tenant"] for r in everyone}) == ["alpha", "bravo"] and len(everyone) == 5
    assert api("anonymous").get(URL).status_code in (401, 403)


@pytest.mark.parametrize(("params", "named"), [
    ({"granularity": "minute"}, "granularity"),
    ({"from": "yesterday"}, "from"),
    ({"to": "2026-13-01"}, "to"),
    ({"key": "abc"}, "key"),
    ({"service": "-3"}, "service"),
    ({"from": "2026-11-22T00:00:00Z", "to": "2026-11-21T00:00:00Z"}, "from"),
    ({"from": "2026-01-01T00:00:00Z", "to": "2026-11-21T00:00:00Z"}, "from"),
    ({"colour": "red"}, "colour"),
    ({"to": "0001-01-01T05:00:00Z"}, "to"),
])
def test_bad_filters_are_a_400_naming_the_parameter(api, owner_a, params, named):
    response = api("owner_a").get(URL, params)
    assert response.status_code == 400 and named in response.json(), response.json()


def test_defaults_cover_the_last_day_up_to_the_current_hour(api, owner_a, tenant_a):
    from django.utils import timezone

    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    UsageHour.objects.create(hour=now, tenant=tenant_a, model="m", requests=3)
    UsageHour.objects.create(hour=now - timedelta(hours=24), tenant=tenant_a, model="m", requests=4)
    body = api("owner_a").get(URL).json()
    assert [r["requests"] for r in body["results"]] == [3]
    assert body["to"] == (now + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
