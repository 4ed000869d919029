"""Drift: the gateway's metered tokens per service and hour against the engines' own token counters as
telemetry stored them; over 1 % is a warning (shown on the pages: tests/web/portal/test_gateway_pages.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from apps.gateway.drift import drift, warnings
from apps.gateway.models import UsageHour
from apps.telemetry.choices import Resolution
from apps.telemetry.models import SeriesPoint
from tests.factories import InferenceServiceFactory

pytestmark = pytest.mark.django_db
HOUR = datetime(2026, 11, 30, 14, 0, tzinfo=UTC)
NOW = HOUR + timedelta(hours=1, minutes=7)  # the hour is whole


def engines(service, hour, minutes=60, prompt_tps=10.0, gen_tps=5.0):
    """One-minute telemetry rows: (10 + 5) tokens/s × 60 s = 900 tokens a minute."""
    SeriesPoint.objects.bulk_create([
        SeriesPoint(service=service, role="", resolution=Resolution.MINUTE, time=hour + timedelta(minutes=m),
                    prompt_tps=prompt_tps, gen_tps=gen_tps) for m in range(minutes)])


def metered(service, hour, prompt, completion):
    UsageHour.objects.create(hour=hour, tenant=service.tenant, service_id=service.pk, key_id=1, model="m",
                             requests=10, prompt_tokens=prompt, completion_tokens=completion)


def test_an_hour_is_judged_against_the_engines_counters(tenant_a):
    agrees, bypassed, sparse = (InferenceServiceFactory(tenant=tenant_a, name=n) for n in ("ok", "bypass", "sparse"))
    for service in (agrees, bypassed):
        engines(service, HOUR)
    metered(agrees, HOUR, 36_000, 17_700)  # 53,700 of the engines' 54,000: 0.56 % apart
    metered(bypassed, HOUR, 30_000, 20_000)  # 50,000: 7.4 % of the tokens never went through the gateway
    engines(sparse, HOUR, minutes=30)
    metered(sparse, HOUR, 10, 10)
    found = drift([agrees.pk, bypassed.pk, sparse.pk], now=NOW)
    ok, = found[agrees.pk]
    assert (ok.hour, ok.engine, ok.metered, ok.coverage, ok.warning) == (HOUR, 54_000, 53_700, 1.0, False)
    bad, = found[bypassed.pk]
    assert bad.gap == 4_000 and bad.ratio == pytest.approx(4000 / 54000) and bad.warning
    thin, = found[sparse.pk]
    assert thin.coverage == 0.5 and not thin.judged and not thin.warning
    assert list(warnings([agrees.pk, bypassed.pk, sparse.pk], now=NOW)) == [bypassed.pk]
    # The current hour is not judged until it is whole; hours past the window are not either.
    assert drift([bypassed.pk], now=HOUR + timedelta(minutes=50))[bypassed.pk] == []
    assert drift([bypassed.pk], now=NOW + timedelta(hours=24))[bypassed.pk] == []


def test_the_gateway_counting_more_than_the_engines_also_warns(tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="chat")
    engines(service, HOUR, prompt_tps=1.0, gen_tps=0.0)  # 3,600 tokens
    metered(service, HOUR, 3_700, 0)
    hour, = drift([service.pk], now=NOW)[service.pk]
    assert hour.gap == -100 and hour.warning
