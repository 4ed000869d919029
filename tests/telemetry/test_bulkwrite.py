"""The scraper's COPY upsert of pod state: new rows inserted, existing ones updated in the named fields only."""

from datetime import UTC, datetime

from apps.telemetry.bulkwrite import upsert_pod_stats
from apps.telemetry.models import PodStat
from tests.factories import InferenceServiceFactory


def test_upsert_inserts_then_updates_only_the_named_fields(db):
    service = InferenceServiceFactory()
    first = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    snapshot = {"engine": "vllm", "quote": 'a "quoted" \\ value\twith tab\nand newline'}
    upsert_pod_stats([PodStat(service_id=service.pk, pod="p-0", role="engine", node="n1", snapshot=snapshot,
                              figures={"ttft_p95": 0.2}, error="", scraped_at=first)],
                     ("role", "node", "snapshot", "figures", "error", "scraped_at"))
    # A failed scrape later: only role, node and error change; the last good snapshot stays for increments.
    upsert_pod_stats([PodStat(service_id=service.pk, pod="p-0", role="engine", node="n2", error="timeout",
                              scraped_at=datetime(2026, 1, 1, 12, 0, 5, tzinfo=UTC)),
                      PodStat(service_id=service.pk, pod="p-1", role="engine", node="n1", error="refused",
                              scraped_at=first)],
                     ("role", "node", "error"))
    rows = {s.pod: s for s in PodStat.objects.filter(service=service)}
    assert set(rows) == {"p-0", "p-1"}
    assert rows["p-0"].snapshot == snapshot and rows["p-0"].figures == {"ttft_p95": 0.2}
    assert (rows["p-0"].node, rows["p-0"].error, rows["p-0"].scraped_at) == ("n2", "timeout", first)
    assert rows["p-1"].snapshot is None and rows["p-1"].error == "refused"


def test_a_snapshot_with_nan_and_infinite_samples_is_stored_and_read_back(db):
    """Engines may export NaN or ±Inf (a ratio with nothing to divide); jsonb refuses a bare NaN, which would
    lose the write of every pod in the chunk."""
    import math

    from apps.telemetry.exposition import Snapshot, parse_snapshot

    text = (
        "# HELP vllm:kv_cache_usage_perc KV-cache usage.\n# TYPE vllm:kv_cache_usage_perc gauge\n"
        'vllm:kv_cache_usage_perc{model_name="m"} NaN\n'
        "# HELP vllm:num_requests_running Running.\n# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="m"} +Inf\n'
        "# HELP vllm:num_requests_waiting Waiting.\n# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{model_name="m"} -Inf\n'
    )
    snapshot = parse_snapshot(text, scraped_at=1.0)
    service = InferenceServiceFactory()
    upsert_pod_stats([PodStat(service_id=service.pk, pod="p-0", role="engine", node="n1", snapshot=snapshot.to_dict(),
                              figures={}, error="", scraped_at=datetime(2026, 1, 1, tzinfo=UTC))],
                     ("role", "node", "snapshot", "figures", "error", "scraped_at"))
    back = Snapshot.from_dict(PodStat.objects.get(service=service).snapshot)
    key = (("model_name", "m"),)
    assert math.isnan(back.gauges["kv_cache_usage_perc"][key])
    assert back.gauges["num_requests_running"][key] == math.inf
    assert back.gauges["num_requests_waiting"][key] == -math.inf
