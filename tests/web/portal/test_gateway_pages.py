"""The portal's Inference keys and Usage pages through the Django test client: the key shown once and
hashed, the API's validation at the field, rotate and revoke audited, roles and tenants enforced, usage
scoped to the tenant, and the CSV export."""

from __future__ import annotations

import csv
import hashlib
import io
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.core.models import AuditEntry
from apps.gateway.models import InferenceKey, UsageHour, UsageRow
from tests.factories import InferenceServiceFactory
from tests.gateway.conftest import issue
from tests.gateway.test_drift import engines
from tests.gateway.test_drift import metered as meter

pytestmark = pytest.mark.django_db
KEYS = reverse("web:inference-keys", args=["alpha"])


def test_a_key_is_shown_once_stored_hashed_and_audited(login, operator_a, tenant_a):
    chat = InferenceServiceFactory(tenant=tenant_a, name="chat")
    client = login(operator_a)
    response = client.post(KEYS, {"name": "support-bot", "expires_days": 30, "services": [chat.pk], "rpm": "60",
                                  "tpm": "", "concurrency": "4", "monthly_token_budget": "1000000"})
    assert response.status_code == 200
    key = InferenceKey.objects.get(name="support-bot")
    plaintext = response.context["issued"]["plaintext"]
    assert plaintext.startswith("sk-") and plaintext in response.content.decode()
    assert key.key_hash == hashlib.sha256(plaintext.encode()).hexdigest()
    assert (key.rpm, key.tpm, key.concurrency, key.monthly_token_budget) == (60, None, 4, 1_000_000)
    assert list(key.services.all()) == [chat] and key.created_by == operator_a
    assert abs(key.expires_at - (timezone.now() + timedelta(days=30))) < timedelta(minutes=1)
    assert AuditEntry.objects.filter(object_id=str(key.pk), via="portal").exists()
    assert plaintext not in client.get(KEYS).content.decode()


@pytest.mark.parametrize(("fields", "field"), [
    ({"rpm": "0"}, "rpm"),
    ({"monthly_token_budget": "-5"}, "monthly_token_budget"),
    ({"concurrency": "0", "tpm": "5"}, "concurrency"),
    ({"priority": "1"}, "priority"),  # above the tenant's highest band (0 without tenant limits)
    ({"priority": "-21"}, "priority"),  # below the lowest band
])
def test_bad_input_is_refused_with_the_apis_words_and_nothing_is_made(login, api, operator_a, fields, field):
    body = {"name": "app", "expires_days": 30, **fields}
    response = login(operator_a).post(KEYS, body)
    assert response.status_code == 422
    portal = response.context["form"].errors[field]
    api_answer = api("operator_a").post("/api/v1/inference-keys/", {"tenant": "alpha", **body}, format="json")
    assert api_answer.status_code == 400 and api_answer.json()[field] == portal
    assert not InferenceKey.objects.exists()


def test_a_taken_name_is_refused_at_the_field(login, api, operator_a, tenant_a):
    issue(tenant_a, "app")
    response = login(operator_a).post(KEYS, {"name": "app", "expires_days": 30})
    assert response.status_code == 422
    assert response.context["form"].errors["name"] == ["The tenant has a key of this name."]
    api_answer = api("operator_a").post("/api/v1/inference-keys/", {"tenant": "alpha", "name": "app"}, format="json")
    assert api_answer.json()["name"] == response.context["form"].errors["name"]
    assert InferenceKey.objects.count() == 1


def test_rotate_and_revoke(login, operator_a, tenant_a):
    key, old = issue(tenant_a, "app")
    client = login(operator_a)
    rotated = client.post(reverse("web:inference-key-action", args=["alpha", key.pk, "rotate"]))
    new = rotated.context["issued"]["plaintext"]
    key.refresh_from_db()
    assert new != old and key.key_hash == hashlib.sha256(new.encode()).hexdigest()
    client.post(reverse("web:inference-key-action", args=["alpha", key.pk, "revoke"]))
    key.refresh_from_db()
    assert key.revoked_at is not None
    refused = client.post(reverse("web:inference-key-action", args=["alpha", key.pk, "rotate"]), follow=True)
    assert "cannot be rotated" in refused.content.decode()
    assert client.post(reverse("web:inference-key-action", args=["alpha", key.pk, "explode"])).status_code == 404


def test_viewers_read_and_other_tenants_are_404(login, viewer_a, member_b, tenant_a):
    key, _ = issue(tenant_a, "app")
    viewer = login(viewer_a)
    page = viewer.get(KEYS)
    assert page.status_code == 200 and "app" in page.content.decode() and "key-form" not in page.content.decode()
    assert viewer.post(KEYS, {"name": "x", "expires_days": 30}).status_code == 403
    assert viewer.post(reverse("web:inference-key-action", args=["alpha", key.pk, "revoke"])).status_code == 403
    other = login(member_b)
    assert other.get(KEYS).status_code == 404
    assert other.get(reverse("web:usage", args=["alpha"])).status_code == 404
    assert other.post(reverse("web:inference-key-action", args=["alpha", key.pk, "revoke"])).status_code == 404
    key.refresh_from_db()
    assert key.revoked_at is None


@pytest.fixture
def metered(tenant_a, tenant_b):
    key, _ = issue(tenant_a, "app")
    InferenceKey.objects.filter(pk=key.pk).update(monthly_token_budget=1000)
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    UsageHour.objects.create(hour=now, tenant=tenant_a, key_id=key.pk, model="chat", requests=4, errors=1,
                             rate_limited=2, prompt_tokens=200, completion_tokens=50)
    UsageHour.objects.create(hour=now - timedelta(hours=1), tenant=tenant_a, key_id=key.pk, model="sql-lora",
                             requests=1, prompt_tokens=40, completion_tokens=10)
    UsageHour.objects.create(hour=now, tenant=tenant_b, model="secret-b-model", requests=9, prompt_tokens=999)
    return key


def test_the_usage_page_sums_by_key_and_model_and_shows_the_budget(login, owner_a, metered, staff):
    for user in (owner_a, staff):
        response = login(user).get(reverse("web:usage", args=["alpha"]))
        assert response.status_code == 200
        assert [(t["name"], t["requests"], t["tokens"], t["errors"], t["rate_limited"])
                for t in response.context["by_model"]] == [("chat", 4, 250, 1, 2), ("sql-lora", 1, 50, 0, 0)]
        assert [(t["name"], t["tokens"]) for t in response.context["by_key"]] == [("app", 300)]
        assert [(k.name, k.month_used, k.month_pct) for k in response.context["keys"]] == [("app", 300, 30)]
        assert "secret-b-model" not in response.content.decode()
    only = login(owner_a).get(reverse("web:usage", args=["alpha"]), {"model": "sql-lora", "range": "7d"})
    assert [t["name"] for t in only.context["by_model"]] == ["sql-lora"]


def test_the_csv_export_has_the_pages_rows(login, owner_a, metered):
    response = login(owner_a).get(reverse("web:usage-csv", args=["alpha"]), {"range": "24h"})
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [(r["model"], r["key"], r["requests"], r["prompt_tokens"]) for r in rows] == [
        ("sql-lora", "app", "1", "40"), ("chat", "app", "4", "200")]
    assert all(r["tenant"] == "alpha" for r in rows)


def test_the_warning_is_shown_on_the_service_page_and_the_overview(login, owner_a, member_b, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="chat")
    last_hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    engines(service, last_hour)
    meter(service, last_hour, 40_000, 10_000)
    client = login(owner_a)
    page = client.get(reverse("web:service", args=["alpha", "chat"])).content.decode()
    assert 'class="error drift-warning"' in page and "54,000" in page and "50,000" in page
    overview = client.get(reverse("web:overview", args=["alpha"])).content.decode()
    assert 'id="drift-warnings"' in overview and "over 1 %" in overview
    meter(service, last_hour - timedelta(hours=1), 1, 1)
    UsageHour.objects.filter(hour=last_hour).update(prompt_tokens=44_000)
    assert 'id="drift-warnings"' not in client.get(reverse("web:overview", args=["alpha"])).content.decode()


def test_the_service_page_shows_the_gateways_view(login, owner_a, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="chat")
    client = login(owner_a)
    assert 'id="gateway-view"' not in client.get(reverse("web:service", args=["alpha", "chat"])).content.decode()
    now = timezone.now()
    UsageHour.objects.create(hour=now.replace(minute=0, second=0, microsecond=0), tenant=tenant_a,
                             service_id=service.pk, model="chat", requests=12, errors=1, rate_limited=3)
    UsageRow.objects.bulk_create([
        UsageRow(at=now - timedelta(minutes=m), tenant=tenant_a, service_id=service.pk, model="chat", status=200,
                 ttft_ms=float(10 * m), duration_ms=100.0) for m in range(1, 11)])
    page = client.get(reverse("web:service", args=["alpha", "chat"]))
    view = page.context["gateway_view"]
    # TTFTs 10, 20 … 100 ms: the median is 55, the 95th percentile 95.5 (linear interpolation).
    assert (view["requests"], view["rate_limited"], view["errors"]) == (12, 3, 1)
    assert view["ttft_p50_ms"] == pytest.approx(55.0) and view["ttft_p95_ms"] == pytest.approx(95.5)
    assert "55.0 / 95.5 ms" in page.content.decode()
