"""Usage split between batch lines and interactive requests: the hourly rollup keeps them apart, the usage API
says which is which, and the portal's Usage page shows them side by side."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.gateway.models import UsageHour, UsageRow
from apps.gateway.rollup import hour_start, rollup_hour
from tests.gateway.conftest import issue

pytestmark = pytest.mark.django_db


@pytest.fixture
def metered(tenant_a):
    """Two interactive requests and three batch lines of one key, model and service, in the current hour."""
    key, _ = issue(tenant_a, "app")
    now = timezone.now()
    rows = [(None, 100, 10), (None, 50, 5), ("batch_a", 7, 1), ("batch_a", 7, 1), ("batch_b", 6, 2)]
    UsageRow.objects.bulk_create([
        UsageRow(at=hour_start(now) + timedelta(seconds=n), tenant=tenant_a, key_id=key.pk, service_id=3,
                 model="chat", status=200, prompt_tokens=prompt, completion_tokens=completion, duration_ms=9.0,
                 batch_id=batch) for n, (batch, prompt, completion) in enumerate(rows)])
    rollup_hour(now)
    return key


def test_the_rollup_keeps_batch_lines_apart_from_interactive_requests(metered):
    hours = {h.batch: h for h in UsageHour.objects.all()}
    assert set(hours) == {False, True}
    assert (hours[False].requests, hours[False].prompt_tokens, hours[False].completion_tokens) == (2, 150, 15)
    assert (hours[True].requests, hours[True].prompt_tokens, hours[True].completion_tokens) == (3, 20, 4)


def test_the_usage_api_and_page_say_which_is_which(metered, api, owner_a, client):
    rows = api("owner_a").get("/api/v1/usage/").json()["results"]
    assert sorted((r["batch"], r["requests"]) for r in rows) == [(False, 2), (True, 3)]
    client.force_login(owner_a)
    page = client.get(reverse("web:usage", args=["alpha"])).content.decode()
    table = page[page.index('id="usage-by-kind"'):]
    table = table[:table.index("</table>")]
    # Tokens: prompt + completion of each kind.
    assert "<td>interactive</td><td>2</td><td>165</td>" in table and "<td>batch</td><td>3</td><td>24</td>" in table
