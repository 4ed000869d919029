"""Reconcile at scale: services created through the API converge on kubesim; steady state writes nothing.

    python bench/reconcile.py [--services 1000] [--workers 2] [--profile kubesim.svg]

Prints, from one run:
(1) the time from the first service created through the API until every service is Ready, with real
    Celery workers reconciling against one kubesim (each as deployed: prefork, WORKER_CONCURRENCY=2);
(2) API requests and writes of a steady-state resync of every service (aim: <= 2 requests, 0 writes);
(3) the periodic resync as the workers run it for two resync intervals, counted at the API server
    through a loopback proxy: requests per service per interval and the requests of every second
    (aim: spread over the interval, no thundering herd);
(4) the time `kubectl apply --server-side` of the same rendered objects takes into a fresh kubesim of
    the same size until every workload is ready, and the ratio ours/kubectl (aim: <= 1.0). The kubectl
    used is printed first (`kubectl: VERSION at PATH`); one older than kubesim's minor version minus one
    (kubectl's version skew policy) is refused before the run, as is a missing kubectl.

By default the runtime image is a mirror path (`mirror.local/vllm/vllm-openai`) that kubesim runs as a
plain container, so the figures measure the control plane rather than 1,250 simulated GPUs in one
kubesim process; `--simulate-engines` uses `vllm/vllm-openai` and runs real simulated engines.
`--profile FILE.svg` records the first kubesim with py-spy (the `bench` extra) into a flame graph (any other
suffix: collapsed stacks, one line per stack, for a script to sum). `--profile-workers PREFIX` records each
worker (its pool processes, every thread, waits included, 10 samples a second) until all are Ready into
PREFIX-N.txt, for `bench/profile_split.py` to split each pass's time.

Uses DATABASE_URL (or the embedded PostgreSQL) with its own database `<name>_bench` beside it, dropped and
recreated on every run, and CELERY_BROKER_URL (or the folder broker). Runs with DEBUG off, as a deployment
does, unless SECRET_KEY is set otherwise, and with the per-token API rate limit raised (API_THROTTLE_RATE,
100000/min unless set) so that creating the fleet is not throttled. Also prints the CPU seconds each part
used (this process with the API's creates, the workers, kubesim, PostgreSQL; kubectl and kubesim on the
other side).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.common import free_port, kubectl_against  # noqa: E402 (the repository root is on the path from here)
from enginevocab.vllm import TAG as VLLM_TAG  # noqa: E402

STEADY_SAMPLE = 250  # services whose steady-state pass is counted request by request
HOP_HEADERS = ("host", "content-length", "transfer-encoding", "connection")
MODES = ("standard", "standard", "serverless", "pd_disaggregated")  # mixed, weighted like a real fleet


def start_kubesim(gpu_nodes: int, cpu_nodes: int = 1, profile: str | None = None,
                  api_only: bool = False) -> tuple[subprocess.Popen, str]:
    from urllib.request import urlopen

    port = free_port()
    command = [sys.executable, "-m", "kubesim", "serve", "--port", str(port), "--fast-start",
               "--nodes", f"h100-sxm-80gb:{gpu_nodes}x8,cpu:{cpu_nodes}", *(["--api-only"] if api_only else [])]
    if profile:  # a flame graph of the simulator while it serves the run (py-spy, the `bench` extra)
        command = [str(Path(sys.executable).with_name("py-spy")), "record", "--nonblocking", "--rate", "50",
                   "--format", "flamegraph" if profile.endswith(".svg") else "raw", "--output", profile, "--", *command]
    proc = subprocess.Popen(
        command,
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            with urlopen(f"{url}/version", timeout=1):
                return proc, url
        except OSError:
            time.sleep(0.2)
    raise SystemExit("kubesim did not start")


def stop(proc: subprocess.Popen) -> None:
    """Stop kubesim; under py-spy an interrupt makes it write the flame graph first."""
    import signal

    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()


def setup_django() -> None:
    import secrets

    from controlplane.devenv import apply_defaults

    if "SECRET_KEY" not in os.environ and "SECRET_KEY_FILE" not in os.environ:
        # Production-like: DEBUG off (no query log in every process), as a deployment runs.
        os.environ["SECRET_KEY"] = secrets.token_urlsafe(50)
        os.environ.setdefault("SECURE_SSL_REDIRECT", "false")  # the bench's API client speaks plain HTTP
    # One operator creating a fleet as fast as the API answers: at 40 ms a create that is 1,500 a minute,
    # past the default per-token limit (1,200/min, a 429 answer). The limit is a setting; the bench raises it
    # so that the time measured is the control plane's, not the limiter's.
    os.environ.setdefault("API_THROTTLE_RATE", "100000/min")
    apply_defaults("controlplane_bench")
    base, name = os.environ["DATABASE_URL"].rsplit("/", 1)
    bench_db = f"{name}_bench" if name != "controlplane_bench" else name  # beside DATABASE_URL's, not shared
    os.environ["DATABASE_URL"] = f"{base}/{bench_db}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    os.environ["CELERY_QUEUE_PREFIX"] = f"bench{uuid.uuid4().hex[:6]}-"
    import logging

    import django
    from django.db import connection

    django.setup()
    logging.getLogger("controlplane.access").setLevel(logging.WARNING)  # one line per create is noise here
    with connection._nodb_cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{bench_db}" WITH (FORCE)')
        cursor.execute(f'CREATE DATABASE "{bench_db}"')
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def create_services(n: int, url: str, image: str) -> list[int]:
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    from apps.catalog.models import Model, Runtime
    from apps.clusters.models import Cluster
    from apps.tenancy.models import Tenant
    from apps.tenancy.queues import set_gpu_quota

    cluster = Cluster.objects.create(name="bench", api_url=url, insecure_simulator=True,
                                     open_to_all_tenants=True)
    model = Model.objects.create(name="llama-3-1-8b", source_uri="hf://meta-llama/Llama-3.1-8B-Instruct",
                                 parameters_billions=8.03, layers=32, hidden_size=4096, attention_heads=32,
                                 kv_heads=8, head_dim=128, max_context=131072)
    runtime = Runtime.objects.create(name="vllm", engine="vllm", image=image, tag=VLLM_TAG,
                                     supported_modes=list(set(MODES)))
    tenants = [Tenant.objects.create(slug=f"team-{i}", name=f"Team {i}") for i in range(10)]
    for tenant in tenants:
        set_gpu_quota(tenant, 10_000)
    api = APIClient()
    api.force_authenticate(get_user_model().objects.create_superuser("bench", "bench@example.com", "x"))
    ids = []
    for i in range(n):
        mode = MODES[i % len(MODES)]
        roles = ["prefill", "decode"] if mode == "pd_disaggregated" else ["engine"]
        body = {
            "tenant": tenants[i % len(tenants)].slug, "name": f"svc-{i}", "cluster": cluster.name,
            "model": model.pk, "runtime": runtime.pk, "deployment_mode": mode, "engine_settings": {},
            "routing_policy": "round_robin",
            "pools": [{"role": r, "replicas": 1, "min_replicas": 0 if mode == "serverless" else 1,
                       "max_replicas": 2, "gpus_per_replica": 1, "gpu_type": "h100-sxm-80gb",
                       "nodes_per_replica": 1} for r in roles],
        }
        response = api.post("/api/v1/services/", body, format="json")
        if response.status_code != 201:
            raise SystemExit(f"create failed: {response.status_code} {response.content[:300]!r}")
        ids.append(response.json()["id"])
    return ids


def start_workers(n: int) -> list[subprocess.Popen]:
    prefix = os.environ["CELERY_QUEUE_PREFIX"]
    queues = ",".join(prefix + q for q in ("default", "reconcile"))
    # Each worker as deployed (controlplane/entrypoint.py): the prefork pool, WORKER_CONCURRENCY processes.
    concurrency = os.environ.get("WORKER_CONCURRENCY", "2")
    return [subprocess.Popen([sys.executable, "-m", "celery", "-A", "controlplane", "worker", "--concurrency",
                              concurrency, "--queues", queues, "--loglevel", "WARNING", "--without-gossip",
                              "--without-mingle", "--hostname", f"bench{i}@%h"], cwd=ROOT, env=dict(os.environ),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(n)]


class CountingProxy:
    """A loopback reverse proxy in front of kubesim that counts requests per second (reads and writes),
    so the bench sees the resync's request profile as the API server does, from every worker process."""

    def __init__(self, upstream: str):
        self.upstream = upstream
        self.per_second: dict[int, list[int]] = {}  # second since start -> [reads, writes]
        self.watches = 0
        self.started = time.monotonic()
        self.url = ""

    def reset(self) -> None:
        self.watches = 0
        self.per_second.clear()
        self.started = time.monotonic()

    def start(self) -> str:
        import asyncio
        import threading

        ready = threading.Event()

        def run():
            asyncio.run(self._serve(ready))

        threading.Thread(target=run, daemon=True).start()
        ready.wait(10)
        return self.url

    async def _serve(self, ready) -> None:
        import asyncio

        import aiohttp
        from aiohttp import web

        session = aiohttp.ClientSession(auto_decompress=False)

        async def forward(request: web.Request) -> web.StreamResponse:
            second = int(time.monotonic() - self.started)
            counts = self.per_second.setdefault(second, [0, 0])
            if request.query.get("watch") == "true":
                self.watches += 1  # a watch cache's (re)connection, counted apart from reads and writes
            else:
                counts[0 if request.method in ("GET", "HEAD") else 1] += 1
            body = await request.read()
            try:
                return await send(request, body)
            except aiohttp.ClientError:
                return web.Response(status=502)  # kubesim stopped at the end of the run

        async def send(request: web.Request, body: bytes) -> web.StreamResponse:
            async with session.request(request.method, self.upstream + request.path_qs, data=body,
                                       headers={k: v for k, v in request.headers.items()
                                                if k.lower() not in HOP_HEADERS},
                                       allow_redirects=False, timeout=aiohttp.ClientTimeout(total=None)) as upstream:
                headers = {k: v for k, v in upstream.headers.items()
                           if k.lower() in ("content-type", "content-encoding", "retry-after")}
                if request.query.get("watch") != "true":
                    return web.Response(status=upstream.status, body=await upstream.read(), headers=headers)
                # A watch (the workers' caches) streams: each event passes as it comes.
                response = web.StreamResponse(status=upstream.status, headers=headers)
                response.enable_chunked_encoding()
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
                return response

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", forward)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}"
        ready.set()
        await asyncio.Event().wait()


def profile_workers(procs: list[subprocess.Popen], prefix: str) -> list[subprocess.Popen]:
    import shutil

    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return [subprocess.Popen([spy, "record", "--pid", str(proc.pid), "--subprocesses", "--idle", "--threads",
                              "--rate", "10", "--nonblocking", "--format", "raw", "--output", f"{prefix}-{i}.txt"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i, proc in enumerate(procs)]


def cpu_split(sim: subprocess.Popen, workers: list[subprocess.Popen]) -> dict[str, float]:
    """CPU seconds used so far by each part of a run: this process (the API's creates, or waiting),
    its finished children (kubectl), the workers, kubesim and PostgreSQL."""
    import resource

    from bench.common import cpu_seconds, postgres_cpu_seconds, tree_cpu_seconds

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    split = {"bench+API": sum(os.times()[:2]), "kubectl": children.ru_utime + children.ru_stime,
             "workers": sum(tree_cpu_seconds(p.pid) for p in workers), "kubesim": cpu_seconds(sim.pid),
             "postgres": postgres_cpu_seconds()}
    return split


def cpu_report(before: dict[str, float], after: dict[str, float]) -> str:
    used = {k: after[k] - before[k] for k in after}
    return ", ".join(f"{k} {v:.0f}" for k, v in used.items() if v >= 0.5) + f"; total {sum(used.values()):.0f}"


def wait_ready(url: str, timeout: float) -> float:
    """Seconds until every Deployment and LeaderWorkerSet in kubesim has all its replicas ready."""
    import json
    from urllib.request import urlopen

    started = time.monotonic()
    while time.monotonic() - started < timeout:
        pending = 0
        for path in ("/apis/apps/v1/deployments", "/apis/leaderworkerset.x-k8s.io/v1/leaderworkersets"):
            with urlopen(url + path, timeout=60) as response:
                for item in json.load(response)["items"]:
                    want = (item.get("spec") or {}).get("replicas", 1)
                    if ((item.get("status") or {}).get("readyReplicas") or 0) < want:
                        pending += 1
        if not pending:
            return time.monotonic() - started
        time.sleep(1)
    raise SystemExit("kubectl's objects did not become ready in time")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--simulate-engines", action="store_true", help="run simulated vLLM engines in the pods")
    parser.add_argument("--profile", metavar="FILE",
                        help="record kubesim with py-spy: a flame graph (.svg) or collapsed stacks")
    parser.add_argument("--api-only", action="store_true",
                        help="kubesim --api-only (nothing simulated): time until every service's objects are applied")
    parser.add_argument("--profile-workers", metavar="PREFIX", help="record the workers with py-spy until all Ready")
    args = parser.parse_args()

    setup_django()
    from django.conf import settings
    from django.db.models import F, Sum
    from django.utils import timezone

    from apps.clusters.models import Cluster
    from apps.serving.models import InferenceService, ReconcileRun
    from apps.serving.rendering import render_service
    from apps.serving.rendering.output import to_yaml
    from apps.serving.rendering.spec import spec_from_service
    from workers import reconcile as rec
    from workers.kube import kube_for
    from workers.tasks.reconcile import resync

    # GPUs for every pool, and CPU nodes for the routers of the disaggregated services.
    nodes = {"gpu_nodes": max(1, args.services * 2 // 8 + 2), "cpu_nodes": args.services // 40 + 1}
    sim, url = start_kubesim(**nodes, profile=args.profile, api_only=args.api_only)
    try:  # checked before the run, not after it: a kubectl outside the skew policy would compare other programs
        kubectl, kubectl_version = kubectl_against(url)
    except SystemExit:
        stop(sim)
        raise
    print(f"kubectl: {kubectl_version} at {kubectl}")
    procs = start_workers(args.workers)
    spies = profile_workers(procs, args.profile_workers) if args.profile_workers else []
    try:
        started = time.monotonic()
        cpu_before = cpu_split(sim, procs)
        image = "vllm/vllm-openai" if args.simulate_engines else "mirror.local/vllm/vllm-openai"
        ids = create_services(args.services, url, image)
        created = time.monotonic() - started
        last_tick = 0.0
        # Against --api-only no pod ever runs: the first passes' applies are what is timed.
        pending = (InferenceService.objects.filter(observed_generation__lt=F("generation")) if args.api_only
                   else InferenceService.objects.exclude(phase="Ready"))
        while pending.exists():
            if time.monotonic() - started > args.timeout:
                raise SystemExit("services did not converge in time")
            if time.monotonic() - last_tick >= settings.RESYNC_TICK_SECONDS:
                resync.delay()  # what beat does every RESYNC_TICK_SECONDS
                last_tick = time.monotonic()
            time.sleep(0.5)
        ours_ready = time.monotonic() - started
        for spy in spies:
            stop(spy)  # an interrupt: py-spy writes its stacks
        applied = ReconcileRun.objects.aggregate(n=Sum("applied"))["n"] or 0
        print(f"services: {len(ids)} (created through the API in {created:.1f} s)")
        done = "applied" if args.api_only else "Ready"
        print(f"ours: all {done} through the API {ours_ready:.1f} s after the first create "
              f"({ours_ready - created:.1f} s after the last), with {args.workers} workers; objects applied: {applied}")
        print(f"  CPU seconds until all {done}: " + cpu_report(cpu_before, cpu_split(sim, procs)))

        kube = kube_for(InferenceService.objects.first().cluster)
        kube.requests = kube.writes = 0
        # A seeded random sample: a fixed stride would pick one deployment mode only (they cycle in MODES).
        sample = sorted(random.Random(0).sample(ids, min(len(ids), STEADY_SAMPLE)))
        modes = dict(InferenceService.objects.filter(pk__in=sample).values_list("pk", "deployment_mode"))
        by_mode: dict[str, list[int]] = {}
        for pk in sample:
            before = kube.requests
            rec.reconcile(pk)
            by_mode.setdefault(modes[pk], []).append(kube.requests - before)
        print(f"steady-state pass of {len(sample)} of the {len(ids)} services, one after another: {kube.requests} "
              f"API requests ({kube.requests / len(sample):.1f} per service), {kube.writes} writes; per service by "
              "mode: " + ", ".join(f"{mode} {statistics.mean(counts):.1f}" for mode, counts in sorted(by_mode.items())))
        print(f"  watch caches of this process (settings.KUBE_WATCH_CACHE={settings.KUBE_WATCH_CACHE}): "
              f"{kube.cache_requests} lists and watches, once per kind and process, not per pass")
        kube.close()  # its watches end here, before the cluster row points at the proxy

        if not args.api_only:  # nothing converges there: no resync to profile
            # The periodic resync as the workers run it, seen at the API server: requests per second over two
            # resync intervals, through a counting proxy the cluster row now points at.
            proxy = CountingProxy(url)
            Cluster.objects.update(api_url=proxy.start(), updated=timezone.now())  # workers build new clients
            warm_until = time.monotonic() + settings.RECONCILE_RESYNC_SECONDS  # their discovery is not counted
            while time.monotonic() < warm_until:
                resync.delay()
                time.sleep(settings.RESYNC_TICK_SECONDS)
            window = 2 * settings.RECONCILE_RESYNC_SECONDS
            proxy.reset()
            while time.monotonic() - proxy.started < window:
                resync.delay()
                time.sleep(settings.RESYNC_TICK_SECONDS)
            seconds = [proxy.per_second.get(i, [0, 0]) for i in range(int(window))]
            reads, writes = sum(c[0] for c in seconds), sum(c[1] for c in seconds)
            per_second = [c[0] + c[1] for c in seconds]
            intervals = window / settings.RECONCILE_RESYNC_SECONDS
            print(f"periodic resync over {window:.0f} s ({intervals:.0f} intervals of "
                  f"{settings.RECONCILE_RESYNC_SECONDS} s): {reads} reads, {writes} writes; "
                  f"{(reads + writes) / len(ids) / intervals:.1f} requests per service "
                  f"per interval; requests per second: max {max(per_second)}, mean {statistics.mean(per_second):.0f}, "
                  f"max/mean {max(per_second) / max(statistics.mean(per_second), 1):.1f}; "
                  f"watches (re)started: {proxy.watches}")
            print("requests per second: " + " ".join(str(n) for n in per_second))
        from bench.common import process_tree, rss_megabytes

        rss = [rss_megabytes(pid) for proc in procs for pid in process_tree(proc.pid)]
        print(f"worker memory with its watch caches: largest process {max(rss):.0f} MB RSS, all {len(rss)} worker "
              f"processes {sum(rss):.0f} MB")

        objects = []
        for service in InferenceService.objects.all():
            objects.extend(render_service(spec_from_service(service)))
    finally:
        for proc in procs:
            proc.terminate()
        stop(sim)

    # The same objects applied with kubectl into a fresh kubesim of the same size, and the time until
    # every workload is ready: what the control plane's end-to-end time is held against.
    sim_b, url_b = start_kubesim(**nodes, api_only=args.api_only)
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
            handle.write(to_yaml(objects))
        t0 = time.monotonic()
        cpu_before = cpu_split(sim_b, [])
        subprocess.run([kubectl, "--server", url_b, "apply", "--server-side", "--field-manager", "controlplane",
                        "--force-conflicts", "-f", handle.name], check=True, stdout=subprocess.DEVNULL)
        applied_s = time.monotonic() - t0
        kubectl_ready = applied_s + (0.0 if args.api_only else wait_ready(url_b, args.timeout))
        kubectl_cpu = cpu_report(cpu_before, cpu_split(sim_b, []))
    finally:
        stop(sim_b)
    print(f"kubectl apply --server-side of the same {len(objects)} objects: applied in {applied_s:.1f} s, "
          f"all ready {kubectl_ready:.1f} s after the start")
    print("  CPU seconds until all ready: " + kubectl_cpu)
    if args.api_only:
        print(f"ratio ours/kubectl, time to all applied (kubesim --api-only): {ours_ready / kubectl_ready:.2f}")
    else:
        print(f"ratio ours/kubectl, time to all Ready: {ours_ready / kubectl_ready:.2f} (aim: <= 1.0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
