"""The hourly usage rollup: sums per (tenant, key, service, model), errors and 429s counted, rerun-safe."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from apps.gateway.models import UsageHour, UsageRow
from apps.gateway.rollup import rollup_hour

pytestmark = pytest.mark.django_db
HOUR = datetime(2026, 11, 30, 14, 0, tzinfo=UTC)


def row(tenant, minute, *, key=1, model="chat", status=200, prompt=10, cached=0, completion=5):
    return UsageRow(at=HOUR + timedelta(minutes=minute), tenant=tenant, key_id=key, service_id=7, model=model,
                    status=status, prompt_tokens=prompt, cached_tokens=cached, completion_tokens=completion,
                    ttft_ms=12.0, duration_ms=40.0)


def test_rollup_sums_one_hour_and_is_idempotent(tenant_a, tenant_b):
    UsageRow.objects.bulk_create([
        row(tenant_a, 0, prompt=100, cached=40, completion=20),
        row(tenant_a, 59, prompt=1, completion=2, status=429),
        row(tenant_a, 30, status=503, prompt=0, completion=0),
        row(tenant_a, 10, key=2),
        row(tenant_b, 5, prompt=7),
        row(tenant_a, 60),  # the next hour
        row(tenant_a, -1),  # the hour before
    ])
    assert rollup_hour(HOUR + timedelta(minutes=17)) == 3
    assert rollup_hour(HOUR) == 3
    alpha_key1 = UsageHour.objects.get(hour=HOUR, tenant=tenant_a, key_id=1)
    assert (alpha_key1.requests, alpha_key1.errors, alpha_key1.rate_limited) == (3, 1, 1)
    assert (alpha_key1.prompt_tokens, alpha_key1.cached_tokens, alpha_key1.completion_tokens) == (101, 40, 22)
    assert UsageHour.objects.get(hour=HOUR, tenant=tenant_b).prompt_tokens == 7
    assert UsageHour.objects.filter(hour=HOUR).count() == 3
    assert UsageHour.objects.restrict(None).count() == 0
