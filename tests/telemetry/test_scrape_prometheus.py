"""A cluster with a Prometheus URL: pods are still listed from kubesim (ready replicas, roles), but the
figures come from PromQL against a fake Prometheus HTTP API, and no engine pod is contacted."""

from __future__ import annotations

import json
import re
import time
import urllib.request

from apps.telemetry.models import PodStat, SeriesPoint
from tests.ports import closed_port
from tests.telemetry.servers import serving_app
from workers.telemetry import scrape_all

SERVICE_TTFT_P95 = 0.25


def fake_prometheus(path, query):
    """Answer the figure queries: TTFT p95 of the selection (or of each pod), KV usage, the model name and
    the pod count; every other figure is NaN (no data in the window)."""
    q = query["query"]
    pods = sorted(re.search(r'pod=~"([^"]*)"', q).group(1).split("|"))
    by_pod = "by (pod" in q

    def vector(value_of):
        if by_pod:
            return [{"metric": {"pod": p, "model_name": "llama"}, "value": [0, value_of(i)]} for i, p in enumerate(pods)]
        return [{"metric": {"model_name": "llama"}, "value": [0, value_of(None)]}]

    if "histogram_quantile(0.95" in q and "time_to_first_token" in q:
        result = vector(lambda i: str(SERVICE_TTFT_P95 if i is None else 0.1 * (i + 1)))
    elif "kv_cache_usage_perc" in q:
        result = vector(lambda i: "0.5")
    elif q.startswith("count"):
        result = vector(lambda i: "1" if by_pod else str(len(pods)))
    else:
        result = vector(lambda i: "NaN")
    body = {"status": "success", "data": {"resultType": "vector", "result": result}}
    return 200, "application/json", json.dumps(body)


def hold_pod_proxy(sim) -> None:
    """Make every pod-proxy request wait 20 s, so a scraper that contacted a pod would show it."""
    body = json.dumps({"latency_ms": 20000, "path_contains": "/proxy/metrics"}).encode()
    request = urllib.request.Request(f"{sim.url}/kubesim/faults", data=body, method="PATCH",
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=10).close()


def test_figures_come_from_promql_and_no_pod_is_scraped(deploy, tenant_a, sim, sim_cluster):
    service = deploy(tenant_a, "chat")
    hold_pod_proxy(sim)
    with serving_app(fake_prometheus) as (url, requests):
        sim_cluster.prometheus_url = url
        sim_cluster.save()
        started = time.monotonic()
        [report] = scrape_all()
        elapsed = time.monotonic() - started

    assert (report.pods, report.errors) == (2, 0) and elapsed < 15  # a held pod proxy takes 20 s
    # 22 queries for the whole service and 22 grouped by pod (vLLM's 15 figures, the CPU tier's hit rate and load
    # rate, speculative decoding's acceptance rate, and the autoscaler's queue time and prompt-length p95, requests
    # finished and prompt tokens waiting), all in the service's namespace.
    assert len(requests) == 44 and all("tenant-alpha" in urllib.request.unquote(r) for r in requests)
    [point] = SeriesPoint.objects.filter(service=service)
    assert (point.ttft_p95, point.kv_usage, point.ready_replicas) == (SERVICE_TTFT_P95, 0.5, 2)
    assert point.ttft_p50 is None and point.gen_tps is None
    stats = list(PodStat.objects.filter(service=service).order_by("pod"))
    assert [s.figures["ttft_p95_s"] for s in stats] == [0.1, 0.2]
    assert all(s.snapshot is None and s.figures["model"] == "llama" for s in stats)


def test_an_unreachable_prometheus_is_an_error_per_pod_and_rows_keep_the_replicas(deploy, tenant_a, sim_cluster):
    service = deploy(tenant_a, "chat")
    with closed_port() as port:
        sim_cluster.prometheus_url = f"http://127.0.0.1:{port}"
        sim_cluster.save()
        [report] = scrape_all()

    assert (report.pods, report.errors) == (2, 2)
    [point] = SeriesPoint.objects.filter(service=service)
    assert point.ready_replicas == 2 and point.ttft_p95 is None
    assert all(sim_cluster.prometheus_url in s.error for s in PodStat.objects.filter(service=service))
