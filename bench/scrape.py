"""Benchmark: the telemetry scraper over 500 engines every 5 s.

    DEBUG=1 FIELD_ENCRYPTION_KEY=... DATABASE_URL=postgres://... .venv/bin/python bench/scrape.py [--engines 500]
        [--services 250] [--cycles 12] [--period 5]

A separate process plays the Kubernetes API server: it answers the pod list and serves every pod's
`/metrics` at the pod-proxy path, from expositions of a real kubesim vLLM engine (Llama-3.1-8B on H100,
warmed with requests) whose counters and buckets grow on every scrape. This process runs the real
scraper (`workers.telemetry.scrape_cluster`: official client, thread pool, parse, increments, merges,
bulk writes) into a throw-away database, and prints the CPU the scraper used per cycle (all of this
process's threads), the cycle's wall time, the p95 lag from a pod's scrape to its row being committed,
and the database bytes one service's series costs per day (table and indexes, measured).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import free_port  # noqa: E402 (the repository root is on the path from here)
from enginevocab.vllm import IMAGE_REF as VLLM_IMAGE_REF  # noqa: E402
from enginevocab.vllm import TAG as VLLM_TAG  # noqa: E402

VARIANTS = 80


# --- The fake API server (its own process, so its CPU is not counted) ----------------------------------


def engine_exposition() -> str:
    """A real exposition of a kubesim vLLM engine after some traffic."""
    from kubesim.engines.harness import metrics_after, pod_context

    ctx = pod_context(VLLM_IMAGE_REF, ["--model", "meta-llama/Llama-3.1-8B-Instruct"], seed=3)
    requests = [{"prompt": "hello " * (50 + i), "max_tokens": 20} for i in range(40)]
    return asyncio.run(metrics_after(ctx, requests))


_CUMULATIVE = re.compile(r"^(vllm:\S+?(?:_total|_bucket|_count|_sum))(\{[^}]*\})? (\S+)$")


def grown(text: str, factor: float) -> str:
    """The exposition with every counter and histogram sample multiplied by `factor` (gauges as they were)."""
    out = []
    for line in text.splitlines():
        match = _CUMULATIVE.match(line)
        if match and not line.startswith("#"):
            name, labels, value = match.groups()
            out.append(f"{name}{labels or ''} {float(value) * factor:.1f}")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def serve(port: int, engines: int, services: int) -> None:
    from aiohttp import web

    from apps.serving.names import COMPONENT_LABEL, MANAGED_BY, MANAGED_BY_LABEL, SERVICE_UID_LABEL

    template = engine_exposition()
    variants = [grown(template, 1 + 0.05 * n).encode() for n in range(VARIANTS)]
    uids = [f"00000000-0000-4000-8000-{i:012d}" for i in range(services)]
    pods = []
    for i in range(engines):
        labels = {MANAGED_BY_LABEL: MANAGED_BY, COMPONENT_LABEL: "engine", SERVICE_UID_LABEL: uids[i % services]}
        pods.append({
            "metadata": {"name": f"engine-{i:04d}", "namespace": f"tenant-{i % 10}", "labels": labels},
            "spec": {"nodeName": f"gpu-{i // 8:03d}",
                     "containers": [{"name": "engine", "ports": [{"name": "http", "containerPort": 8000}]}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        })
    pod_list = json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": pods}).encode()
    served: dict[str, int] = {}

    async def list_pods(request):
        return web.Response(body=pod_list, content_type="application/json")

    async def metrics(request):
        name = request.match_info["pod"]
        n = served.get(name, 0)
        served[name] = n + 1
        return web.Response(body=variants[min(n, VARIANTS - 1)], content_type="text/plain")

    app = web.Application()
    app.router.add_get("/api/v1/pods", list_pods)
    app.router.add_get("/api/v1/namespaces/{ns}/pods/{pod}:{port}/proxy/metrics", metrics)
    print("ready", flush=True)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# --- The scraper side ----------------------------------------------------------------------------------


def populate(url: str, services: int):
    from apps.catalog.models import Model, Runtime
    from apps.clusters.models import Cluster
    from apps.serving.models import InferenceService, Pool
    from apps.tenancy.models import Tenant
    from apps.tenancy.queues import set_gpu_quota

    cluster = Cluster.objects.create(name="bench", api_url=url, insecure_simulator=True,
                                     open_to_all_tenants=True)
    model = Model.objects.create(name="llama-3-1-8b", source_uri="hf://meta-llama/Llama-3.1-8B-Instruct",
                                 parameters_billions=8.03, layers=32, hidden_size=4096, attention_heads=32,
                                 kv_heads=8, head_dim=128, max_context=131072)
    runtime = Runtime.objects.create(name="vllm", engine="vllm", image="vllm/vllm-openai", tag=VLLM_TAG)
    tenants = Tenant.objects.bulk_create([Tenant(slug=f"tenant-{i}", name=f"T{i}") for i in range(10)])
    for tenant in tenants:
        set_gpu_quota(tenant, 10_000)
    created = InferenceService.objects.bulk_create([
        InferenceService(tenant=tenants[i % 10], name=f"svc-{i:04d}", cluster=cluster, model=model, runtime=runtime,
                         uid=f"00000000-0000-4000-8000-{i:012d}")
        for i in range(services)
    ])
    Pool.objects.bulk_create([Pool(service=s, role="engine", replicas=2, max_replicas=2) for s in created])
    return cluster


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", type=int, default=500)
    parser.add_argument("--services", type=int, default=250)
    parser.add_argument("--cycles", type=int, default=12)
    parser.add_argument("--period", type=float, default=5.0)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.engines, args.services)
        return 0

    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--engines", str(args.engines),
                               "--services", str(args.services)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready", "fake API server did not start"
        return run(args, f"http://127.0.0.1:{port}")
    finally:
        server.terminate()
        server.wait(10)


def run(args, url: str) -> int:
    from bench.common import setup_django

    setup_django("bench/scrape.py")
    from django.db import connection

    from apps.telemetry.models import PodStat, SeriesPoint
    from bench.common import throwaway_database
    from workers.telemetry import scrape_cluster

    with throwaway_database(prefix="test_"):
        cluster = populate(url, args.services)
        cpu, walls, lags = [], [], []
        next_at = time.monotonic()
        for cycle in range(args.cycles + 1):
            next_at += args.period
            c0 = time.process_time()
            report = scrape_cluster(cluster)
            used = time.process_time() - c0
            assert report.errors == 0 and report.pods == args.engines, report
            if cycle:  # the first cycle has no previous snapshots (no increments) and warms the clients
                cpu.append(used)
                walls.append(report.duration_s)
                lags.extend(report.lags_s)
            time.sleep(max(0.0, next_at - time.monotonic()))
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE telemetry_seriespoint")
            cursor.execute("SELECT pg_total_relation_size('telemetry_seriespoint'), "
                           "pg_total_relation_size('telemetry_podstat')")
            series_bytes, podstat_bytes = cursor.fetchone()
        rows = SeriesPoint.objects.count()
        with_figures = SeriesPoint.objects.filter(ttft_p95__isnull=False).count()
        per_row = series_bytes / rows
        per_day = 86400 / args.period
        raw_day = per_row * per_day
        rollup_day = per_row * 1440
        lags.sort()
        p95_lag = lags[int(0.95 * (len(lags) - 1))]
        print(f"engines {args.engines} in {args.services} services, scraped every {args.period:g} s, "
              f"{args.cycles} measured cycles")
        print(f"CPU per cycle: mean {statistics.mean(cpu):.3f} s, max {max(cpu):.3f} s "
              f"= {statistics.mean(cpu) / args.period:.2f} of a core at this period")
        print(f"cycle wall time: mean {statistics.mean(walls):.3f} s, max {max(walls):.3f} s; "
              f"max/period {max(walls) / args.period:.2f} (aim: <= 1, one worker process)")
        print(f"lag from scrape to committed row: p95 {p95_lag:.3f} s (max {lags[-1]:.3f} s)")
        print(f"series rows: {rows} ({with_figures} with latency figures), {per_row:.0f} bytes per row "
              "with indexes")
        print(f"database bytes per service-day: raw {raw_day / 1e6:.2f} MB ({per_day:.0f} rows, kept "
              f"24 h) + rollups {rollup_day / 1e6:.3f} MB (1440 rows, kept 30 days); "
              f"steady state per service ≈ {(raw_day + 30 * rollup_day) / 1e6:.1f} MB")
        print(f"latest per-pod state: {podstat_bytes / PodStat.objects.count() / 1e3:.1f} kB per pod (fixed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
