"""The hourly usage rollup: sums per (tenant, key, service, model), errors and 429s counted, rerun-safe."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from apps.gateway.models import UsageBatch, UsageHour, UsageRow
from apps.gateway.rollup import roll_up_recent, rollup_hour

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


def test_ttft_percentiles_per_hour(tenant_a):
    UsageRow.objects.bulk_create([row(tenant_a, minute) for minute in range(3)])
    UsageRow.objects.filter(at=HOUR).update(ttft_ms=30.0)
    UsageRow.objects.filter(at=HOUR + timedelta(minutes=1)).update(ttft_ms=None)  # refused: no first token
    rollup_hour(HOUR)
    hour = UsageHour.objects.get(hour=HOUR)
    # Of 12 and 30 ms (the refusal has none): the median halfway, the 95th percentile near the top.
    assert hour.ttft_p50_ms == pytest.approx(21.0) and hour.ttft_p95_ms == pytest.approx(29.1)


def test_the_periodic_pass_catches_up_rolls_late_rows_again_and_prunes(tenant_a, settings):
    settings.TELEMETRY_RAW_RETENTION_HOURS, settings.TELEMETRY_ROLLUP_RETENTION_DAYS = 24, 30
    settings.GATEWAY_ROLLUP_LATE_HOURS = 2
    now = HOUR + timedelta(minutes=20)
    UsageRow.objects.bulk_create([row(tenant_a, 10), row(tenant_a, -30), row(tenant_a, -285), row(tenant_a, -1500)])
    old = UsageHour.objects.create(hour=datetime(2026, 10, 15, tzinfo=UTC), tenant=tenant_a, model="m", requests=1)
    # Spool markers a gateway's crash left behind: the one past the rollup retention goes.
    UsageBatch.objects.create(id=uuid.uuid4(), at=now - timedelta(days=31))
    recent = UsageBatch.objects.create(id=uuid.uuid4(), at=now - timedelta(days=29))
    counts = roll_up_recent(now)
    # Nothing was rolled up yet: every hour from the oldest row's (25 h ago) to the current one.
    hours = set(UsageHour.objects.values_list("hour", flat=True))
    assert hours == {HOUR, HOUR - timedelta(hours=1), HOUR - timedelta(hours=5), HOUR - timedelta(hours=25)}
    assert counts == {"rolled_up": 4, "usage_rows": 1, "usage_hours": 1, "usage_batches": 1}
    assert list(UsageBatch.objects.all()) == [recent]
    assert not UsageHour.objects.filter(pk=old.pk).exists()
    # A late row for the hour before is counted at the next pass; an older hour is left as it was.
    UsageRow.objects.bulk_create([row(tenant_a, -50, prompt=1000), row(tenant_a, -290, prompt=1000)])
    roll_up_recent(now + timedelta(minutes=5))
    assert UsageHour.objects.get(hour=HOUR - timedelta(hours=1)).prompt_tokens == 1010
    assert UsageHour.objects.get(hour=HOUR - timedelta(hours=5)).prompt_tokens == 10


def test_hours_of_the_current_month_are_kept_past_retention(tenant_a, settings):
    settings.TELEMETRY_ROLLUP_RETENTION_DAYS = 30
    first = UsageHour.objects.create(hour=datetime(2026, 12, 1, tzinfo=UTC), tenant=tenant_a, model="m", requests=1)
    roll_up_recent(datetime(2026, 12, 31, 20, 0, tzinfo=UTC))
    assert UsageHour.objects.filter(pk=first.pk).exists()
    roll_up_recent(datetime(2027, 1, 1, 0, 5, tzinfo=UTC))
    assert not UsageHour.objects.filter(pk=first.pk).exists()


def test_beat_schedules_the_rollup_task():
    from django.conf import settings

    from controlplane import tasknames
    from controlplane.celery import app

    entry = next(e for e in settings.CELERY_BEAT_SCHEDULE.values() if e["task"] == tasknames.GATEWAY_USAGE_ROLLUP)
    assert entry["schedule"] == settings.GATEWAY_ROLLUP_SECONDS
    app.loader.import_default_modules()
    assert tasknames.GATEWAY_USAGE_ROLLUP in app.tasks
