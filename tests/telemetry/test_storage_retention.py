"""Downsampling and retention of the stored series, with rows at hand-chosen times and rollups worked out
by hand from the merge rules (latency: worst; gauges and rates: mean; preemptions: sum)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from apps.telemetry.choices import Resolution
from apps.telemetry.models import PodStat, ScrapeCycle, SeriesPoint
from apps.telemetry.retention import prune, rollup
from tests.factories import ClusterFactory, InferenceServiceFactory

NOW = datetime(2026, 1, 10, 12, 0, 30, tzinfo=UTC)


def at(hh, mm, ss):
    return datetime(2026, 1, 10, hh, mm, ss, tzinfo=UTC)


def raw(service, when, role="", **figures):
    return SeriesPoint.objects.create(service=service, role=role, time=when, **figures)


@pytest.fixture
def service(tenant_a):
    return InferenceServiceFactory(tenant=tenant_a, name="chat")


def minute_rows(service, role=""):
    return {p.time: p for p in SeriesPoint.objects.filter(service=service, role=role, resolution=Resolution.MINUTE)}


def test_whole_minutes_roll_up_with_the_worst_latency_and_mean_gauges(service):
    raw(service, at(11, 58, 5), ttft_p95=0.2, itl_p50=0.01, kv_usage=0.5, waiting=1, gen_tps=100, preemptions=1,
        ready_replicas=2)
    raw(service, at(11, 58, 35), ttft_p95=0.6, itl_p50=None, kv_usage=0.3, waiting=3, gen_tps=300, preemptions=2,
        ready_replicas=4)
    raw(service, at(11, 59, 10), ttft_p95=0.4, kv_usage=0.8)  # its minute ended 30 s ago: not rolled up yet
    raw(service, at(10, 0, 0), ttft_p95=1.0, ready_replicas=1)
    raw(service, at(11, 58, 20), role="decode", gen_tps=50)

    written = rollup(NOW)

    assert written == 3
    rows = minute_rows(service)
    assert set(rows) == {at(10, 0, 0), at(11, 58, 0)}
    m = rows[at(11, 58, 0)]
    assert m.ttft_p95 == pytest.approx(0.6)
    assert m.itl_p50 == pytest.approx(0.01)  # a missing figure does not drag the minute down
    assert m.kv_usage == pytest.approx(0.4)
    assert m.waiting == pytest.approx(2.0)
    assert m.gen_tps == pytest.approx(200.0)
    assert m.preemptions == pytest.approx(3.0)
    assert m.ready_replicas == 3
    assert m.ttft_p50 is None
    assert rows[at(10, 0, 0)].ttft_p95 == pytest.approx(1.0)
    assert minute_rows(service, "decode")[at(11, 58, 0)].gen_tps == pytest.approx(50.0)


def test_rolling_up_again_writes_nothing_and_picks_up_where_it_stopped(service):
    raw(service, at(11, 58, 5), ttft_p95=0.2)
    raw(service, at(11, 59, 10), ttft_p95=0.4)
    assert rollup(NOW) == 1

    assert rollup(NOW) == 0
    assert rollup(NOW + timedelta(minutes=1)) == 1

    assert set(minute_rows(service)) == {at(11, 58, 0), at(11, 59, 0)}


def test_prune_drops_rows_past_retention_and_keeps_each_clusters_newest_cycle(service, settings):
    settings.TELEMETRY_RAW_RETENTION_HOURS = 1
    settings.TELEMETRY_ROLLUP_RETENTION_DAYS = 30
    old_raw = raw(service, at(10, 0, 0), ttft_p95=1.0)
    kept_raw = raw(service, at(11, 30, 0), ttft_p95=0.5)
    old_rollup = SeriesPoint.objects.create(service=service, resolution=Resolution.MINUTE,
                                            time=NOW - timedelta(days=31))
    kept_rollup = SeriesPoint.objects.create(service=service, resolution=Resolution.MINUTE, time=at(10, 0, 0))
    PodStat.objects.create(service=service, pod="gone", role="engine", scraped_at=NOW - timedelta(hours=2))
    PodStat.objects.create(service=service, pod="live", role="engine", scraped_at=NOW - timedelta(seconds=5))
    cluster = ClusterFactory()
    for hours, total in ((5, 1), (3, 2)):
        ScrapeCycle.objects.create(cluster=cluster, started_at=NOW - timedelta(hours=hours), duration_s=0.1,
                                   total_cycles=total)

    counts = prune(NOW)

    assert counts == {"raw": 1, "rollup": 1, "pods": 1, "cycles": 1}
    remaining = set(SeriesPoint.objects.values_list("pk", flat=True))
    assert remaining == {kept_raw.pk, kept_rollup.pk} and old_raw.pk not in remaining and old_rollup.pk not in remaining
    assert list(PodStat.objects.values_list("pod", flat=True)) == ["live"]
    # The newest cycle stays even when old: the /metrics counters continue from its totals.
    assert list(ScrapeCycle.objects.values_list("total_cycles", flat=True)) == [2]


def test_prune_cuts_each_resolution_at_its_own_cutoff(service, settings):
    settings.TELEMETRY_RAW_RETENTION_HOURS = 1
    settings.TELEMETRY_ROLLUP_RETENTION_DAYS = 2
    # Cut-offs: raw rows before 11:00:30 today go, minute rows before 12:00:30 two days ago go.
    def minute(when):
        return SeriesPoint.objects.create(service=service, resolution=Resolution.MINUTE, time=when)

    raw_gone = [raw(service, at(11, 0, 30) - timedelta(microseconds=1)), raw(service, NOW - timedelta(days=3)),
                raw(service, at(10, 0, 0), role="decode")]
    raw_kept = [raw(service, at(11, 0, 30)), raw(service, at(11, 59, 55), role="decode")]
    minute_gone = [minute(datetime(2026, 1, 8, 12, 0, tzinfo=UTC)), minute(datetime(2026, 1, 1, 0, 0, tzinfo=UTC))]
    minute_kept = [minute(datetime(2026, 1, 8, 12, 1, tzinfo=UTC)), minute(at(10, 0, 0)), minute(at(11, 58, 0))]

    counts = prune(NOW)

    assert (counts["raw"], counts["rollup"]) == (3, 2)
    remaining = set(SeriesPoint.objects.values_list("pk", flat=True))
    assert remaining == {p.pk for p in raw_kept + minute_kept}
    assert not remaining & {p.pk for p in raw_gone + minute_gone}
    assert prune(NOW) == {"raw": 0, "rollup": 0, "pods": 0, "cycles": 0}


def test_rollup_resumes_after_the_newest_minute_row_not_the_oldest_raw_row(service):
    SeriesPoint.objects.create(service=service, resolution=Resolution.MINUTE, time=at(11, 55, 0), ttft_p95=9.0)
    raw(service, at(11, 50, 10), ttft_p95=0.1)  # before the watermark: its minute is taken as done
    raw(service, at(11, 55, 40), ttft_p95=0.2)  # the watermark's own minute is not written again
    raw(service, at(11, 56, 10), ttft_p95=0.3)
    raw(service, at(11, 58, 20), ttft_p95=0.4)

    assert rollup(NOW) == 2

    rows = minute_rows(service)
    assert set(rows) == {at(11, 55, 0), at(11, 56, 0), at(11, 58, 0)}
    assert rows[at(11, 55, 0)].ttft_p95 == pytest.approx(9.0)
    assert rows[at(11, 56, 0)].ttft_p95 == pytest.approx(0.3)
    assert rows[at(11, 58, 0)].ttft_p95 == pytest.approx(0.4)
