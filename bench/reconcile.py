"""Reconcile at scale: services created through the API converge on kubesim; steady state writes nothing.

    python bench/reconcile.py [--services 1000] [--workers 2]

Prints (1) the time until every service is Ready with real Celery workers and objects applied,
(2) API requests and writes of one steady-state resync of all services (aim: zero writes), and
(3) the time our reconciler takes to apply the same pre-rendered objects into a fresh kubesim against
`kubectl apply --server-side` of them, and the ratio (aim: within 2x).

By default the runtime image is a mirror path (`mirror.local/vllm/vllm-openai`) that kubesim runs as a
plain container, so the figures measure the control plane rather than 1,250 simulated GPUs in one
kubesim process; `--simulate-engines` uses `vllm/vllm-openai` and runs real simulated engines.

Uses DATABASE_URL (or the embedded PostgreSQL) with its own database `controlplane_bench`, dropped and
recreated on every run, and CELERY_BROKER_URL (or the folder broker).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MODES = ("standard", "standard", "serverless", "pd_disaggregated")  # mixed, weighted like a real fleet


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_kubesim(gpu_nodes: int, cpu_nodes: int = 1) -> tuple[subprocess.Popen, str]:
    from urllib.request import urlopen

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kubesim", "serve", "--port", str(port), "--fast-start",
         "--nodes", f"h100-sxm-80gb:{gpu_nodes}x8,cpu:{cpu_nodes}"],
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


def setup_django() -> None:
    from controlplane.devenv import apply_defaults

    apply_defaults("controlplane_bench")
    base = os.environ["DATABASE_URL"].rsplit("/", 1)[0]
    os.environ["DATABASE_URL"] = f"{base}/controlplane_bench"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    os.environ["CELERY_QUEUE_PREFIX"] = f"bench{uuid.uuid4().hex[:6]}-"
    import django
    from django.db import connection

    django.setup()
    with connection._nodb_cursor() as cursor:
        cursor.execute("DROP DATABASE IF EXISTS controlplane_bench WITH (FORCE)")
        cursor.execute("CREATE DATABASE controlplane_bench")
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def create_services(n: int, url: str, image: str) -> list[int]:
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    from apps.catalog.models import Model, Runtime
    from apps.clusters.models import Cluster
    from apps.tenancy.models import Tenant

    cluster = Cluster.objects.create(name="bench", api_url=url, insecure_simulator=True,
                                     open_to_all_tenants=True)
    model = Model.objects.create(name="llama-3-1-8b", source_uri="hf://meta-llama/Llama-3.1-8B-Instruct",
                                 parameters_billions=8.03, layers=32, hidden_size=4096, attention_heads=32,
                                 kv_heads=8, head_dim=128, max_context=131072)
    runtime = Runtime.objects.create(name="vllm", engine="vllm", image=image, tag="v0.33.0",
                                     supported_modes=list(set(MODES)))
    tenants = [Tenant.objects.create(slug=f"team-{i}", name=f"Team {i}", gpu_quota=10_000) for i in range(10)]
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
    return [subprocess.Popen([sys.executable, "-m", "celery", "-A", "workers", "worker", "--pool", "solo",
                              "--queues", queues, "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
                              "--hostname", f"bench{i}@%h"], cwd=ROOT, env=dict(os.environ),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(n)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--simulate-engines", action="store_true", help="run simulated vLLM engines in the pods")
    args = parser.parse_args()

    setup_django()
    from apps.serving.models import InferenceService
    from apps.serving.rendering import render_service
    from apps.serving.rendering.output import to_yaml
    from apps.serving.rendering.spec import spec_from_service
    from workers import reconcile as rec
    from workers.kube import kube_for
    from workers.tasks.reconcile import resync

    # GPUs for every pool, and CPU nodes for the routers of the disaggregated services.
    sim, url = start_kubesim(gpu_nodes=max(1, args.services * 2 // 8 + 2), cpu_nodes=args.services // 40 + 1)
    procs = start_workers(args.workers)
    try:
        started = time.monotonic()
        image = "vllm/vllm-openai" if args.simulate_engines else "mirror.local/vllm/vllm-openai"
        ids = create_services(args.services, url, image)
        created = time.monotonic() - started
        while InferenceService.objects.exclude(phase="Ready").exists():
            if time.monotonic() - started > args.timeout:
                raise SystemExit("services did not converge in time")
            resync.delay()  # what beat does every RESYNC_TICK_SECONDS
            time.sleep(10)
        converged = time.monotonic() - started
        from django.db.models import Sum

        from apps.serving.models import ReconcileRun

        applied = ReconcileRun.objects.aggregate(n=Sum("applied"))["n"] or 0
        print(f"services: {len(ids)} (created through the API in {created:.1f} s)")
        print(f"time until all Ready: {converged:.1f} s with {args.workers} workers; objects applied: {applied}")

        kube = kube_for(InferenceService.objects.first().cluster)
        kube.requests = kube.writes = 0
        for pk in ids:
            rec.reconcile(pk)
        print(f"steady-state resync of {len(ids)} services: {kube.requests} API requests "
              f"({kube.requests / len(ids):.1f} per service), {kube.writes} writes")

        objects = []
        for service in InferenceService.objects.all():
            objects.extend(render_service(spec_from_service(service)))
    finally:
        for proc in procs:
            proc.terminate()
        sim.terminate()

    # The same objects applied by our reconciler and by kubectl, each into a fresh kubesim.
    sim_a, url_a = start_kubesim(gpu_nodes=2)
    from apps.clusters.models import ClusterCredentials
    from workers.kube import Kube

    try:
        ours = Kube(ClusterCredentials(url_a, "", "", "", False))
        t0 = time.monotonic()
        for obj in objects:
            ours.apply(obj)
        ours_s = time.monotonic() - t0
    finally:
        sim_a.terminate()
    kubectl = shutil.which("kubectl")
    if not kubectl:
        print(f"our server-side apply of {len(objects)} objects: {ours_s:.1f} s; kubectl not on PATH")
        return 0
    sim_b, url_b = start_kubesim(gpu_nodes=2)
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
            handle.write(to_yaml(objects))
        t0 = time.monotonic()
        subprocess.run([kubectl, "--server", url_b, "apply", "--server-side", "--field-manager", "controlplane",
                        "--force-conflicts", "-f", handle.name], check=True, stdout=subprocess.DEVNULL)
        kubectl_s = time.monotonic() - t0
    finally:
        sim_b.terminate()
    print(f"server-side apply of {len(objects)} pre-rendered objects: ours {ours_s:.1f} s, "
          f"kubectl {kubectl_s:.1f} s, ratio ours/kubectl {ours_s / kubectl_s:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
