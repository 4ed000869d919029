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
