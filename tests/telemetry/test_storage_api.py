"""`GET /api/v1/services/{id}/metrics/`: the stored series over a range, scoped like the services API."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.telemetry.choices import Resolution
from apps.telemetry.models import SeriesPoint
from tests.factories import InferenceServiceFactory


def url(service) -> str:
    return f"/api/v1/services/{service.pk}/metrics/"


def row(service, seconds_ago, resolution=Resolution.RAW, role="", **figures):
    return SeriesPoint.objects.create(service=service, role=role, resolution=resolution,
                                      time=timezone.now() - timedelta(seconds=seconds_ago), **figures)


@pytest.fixture
def service_a(tenant_a):
    return InferenceServiceFactory(tenant=tenant_a, name="chat")


@pytest.fixture
def service_b(tenant_b):
    return InferenceServiceFactory(tenant=tenant_b, name="bravo-chat")


def test_viewer_reads_their_services_series(api, service_a):
    row(service_a, 30, ttft_p50=0.1, ttft_p95=0.25, kv_usage=0.5, waiting=3, ready_replicas=2)
    row(service_a, 25, ttft_p95=None, kv_usage=0.75, waiting=0, ready_replicas=2)

    response = api("viewer_a").get(url(service_a), {"since": "5m"})

    assert response.status_code == 200
    data = response.json()
    assert (data["service"], data["role"], data["resolution"], data["step"]) == (service_a.pk, "", "raw", 5)
    assert data["ttft_p95"] == [0.25, None]
    assert data["kv_usage"] == [0.5, 0.75]
    assert data["waiting"] == [3.0, 0.0]
    assert data["ready_replicas"] == [2.0, 2.0]
    assert len(data["time"]) == 2


def test_viewer_never_sees_another_tenants_series(api, service_a, service_b):
    row(service_b, 10, ttft_p95=0.9)

    assert api("viewer_a").get(url(service_b)).status_code == 404
    assert api("member_b").get(url(service_b)).json()["ttft_p95"] == [0.9]
    assert api("member_b").get(url(service_a)).status_code == 404


def test_anonymous_requests_are_refused(api, service_a):
    assert api("anonymous").get(url(service_a)).status_code == 401


def test_staff_read_any_service(api, service_b):
    row(service_b, 10, gen_tps=120.0)

    assert api("staff").get(url(service_b)).json()["gen_tps"] == [120.0]


def test_a_range_older_than_raw_retention_reads_the_minute_rollups(api, service_a, settings):
    settings.TELEMETRY_RAW_RETENTION_HOURS = 1
    row(service_a, 2 * 3600, resolution=Resolution.MINUTE, ttft_p95=0.4)
    row(service_a, 2 * 3600 + 1, ttft_p95=8.0)  # a raw row past retention that prune has not reached yet

    data = api("viewer_a").get(url(service_a), {"since": "3h", "step": "90"}).json()

    # A 3-hour range needs steps of at least 15 s for 720 points; rollups come in whole minutes, so 90 s → 120 s.
    assert (data["resolution"], data["step"]) == ("minute", 120)
    assert data["ttft_p95"] == [0.4]


def test_the_step_grows_to_keep_at_most_720_points(api, service_a):
    data = api("viewer_a").get(url(service_a), {"since": "24h"}).json()

    assert data["step"] == 120  # 86,400 s / 720 points


@pytest.mark.parametrize("params, message", [
    ({"since": "last tuesday"}, "ISO 8601"),
    ({"step": "-5"}, "positive duration"),
    ({"since": "5m", "until": "10m"}, "earlier than until"),
    ({"since": "90d"}, "30 days"),
])
def test_bad_ranges_are_400_with_a_reason(api, service_a, params, message):
    response = api("viewer_a").get(url(service_a), params)

    assert response.status_code == 400
    assert message in response.json()["detail"]


def test_pool_series_of_a_multi_pool_service(api, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="split", pools=[{"role": "prefill"}, {"role": "decode"}])
    row(service, 10, role="decode", gen_tps=300.0)
    row(service, 10, role="prefill", gen_tps=10.0)

    data = api("viewer_a").get(url(service), {"role": "decode"}).json()

    assert (data["role"], data["gen_tps"]) == ("decode", [300.0])


def test_a_rollup_window_ends_with_the_minutes_not_rolled_up_yet(api, service_a, settings):
    settings.TELEMETRY_RAW_RETENTION_HOURS = 1
    rollup = row(service_a, 2 * 3600, resolution=Resolution.MINUTE, ttft_p95=0.4)
    row(service_a, 2 * 3600 + 30, ttft_p95=8.0)  # already in that rollup: not read twice
    row(service_a, 20, ttft_p95=0.3, kv_usage=0.5)
    row(service_a, 10, ttft_p95=0.1, kv_usage=0.25)

    data = api("viewer_a").get(url(service_a), {"since": "3h", "step": "60"}).json()

    assert data["resolution"] == "minute" and data["step"] == 60
    assert data["ttft_p95"][0] == 0.4 and data["time"][0] == rollup.time.replace(second=0, microsecond=0).isoformat(
        ).replace("+00:00", "Z")
    # The two recent raw rows are binned into their minute: one bin with the worst TTFT and the mean KV
    # usage, or two bins when a minute boundary fell between them (10 s apart).
    recent = list(zip(data["ttft_p95"][1:], data["kv_usage"][1:], strict=True))
    same_minute, across_minutes = [(0.3, 0.375)], [(0.3, 0.5), (0.1, 0.25)]
    assert recent in (same_minute, across_minutes)


def test_the_kv_cache_cpu_tier_figures_are_in_the_series(api, service_a):
    row(service_a, 30, kv_usage=0.9, cpu_hit_rate=0.25, cpu_usage=0.5, cpu_load_tps=800.0)
    row(service_a, 25, kv_usage=0.9)  # a scrape without a tier's figures

    data = api("viewer_a").get(url(service_a), {"since": "5m"}).json()

    assert data["cpu_hit_rate"] == [0.25, None]
    assert data["cpu_usage"] == [0.5, None]
    assert data["cpu_load_tps"] == [800.0, None]
