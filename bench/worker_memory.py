"""A worker's memory with warm watch caches at N services: the RSS of a process that imports what a worker
imports and holds one watch cache per kind the reconcile reads (its 12 managed kinds and Pods).

    python bench/worker_memory.py [--services 5000] [--compare-plain]

The cluster is filled faster than through the workers: 40 services are created through the API (every
deployment mode in every one of 10 tenants), their rendered specs are copied to N services (new names and
uids, the objects of real services of those modes), applied with the workers' own client (`Kube.each`,
server-side apply) to one kubesim with --fast-start, and the bench waits until every workload is ready (so
the Pods are there, with their status). Then a fresh process (`--measure`) imports Django, the Celery app
and every task module, reads its RSS, starts the caches, waits until every one is live, and prints its
RSS, its peak RSS (VmHWM: the relist's transient included) and the bytes the caches hold.
`--compare-plain` measures a second process whose caches keep compact JSON and list each kind in one
request, as they did before objects were packed and lists paged (the same objects, the same kubesim).

Uses DATABASE_URL (or the embedded PostgreSQL) with a database `<name>_bench` beside it, dropped and
recreated (as bench/reconcile.py does).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def measure(plain: bool) -> dict:
    """In a fresh process: the RSS of a worker-like process before and after its caches are warm."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    import django

    django.setup()
    import controlplane.celery  # noqa: F401 (a worker's imports: the app and every task module)
    import workers.tasks.autoscale
    import workers.tasks.reconcile
    import workers.tasks.rollout
    import workers.tasks.system
    import workers.tasks.telemetry
    import workers.tasks.whatif  # noqa: F401
    from apps.clusters.models import Cluster
    from workers import kubecache
    from workers.kube import CACHE_POOL_SIZE, api_client, kube_for
    from workers.reconcile import MANAGED_KINDS

    kube = kube_for(Cluster.objects.get())
    paths = {kind: kube.resource(*kind).path() for kind in (*MANAGED_KINDS, ("v1", "Pod"))}
    gc.collect()
    before = _status_kb("VmRSS")
    api = api_client(kube.creds, CACHE_POOL_SIZE)
    caches = []
    started = time.monotonic()
    for (api_version, kind), path in paths.items():
        cache = kubecache.KindCache(api, path, f"{api_version} {kind}")
        if plain:
            cache._packer = PlainPacker()
            cache.page = 10**9
        caches.append(cache.start())
    while not all(c.live for c in caches):
        time.sleep(0.2)
    warm = time.monotonic() - started
    gc.collect()
    time.sleep(1)
    result = {
        "rss_before_mb": before / 1024, "rss_mb": _status_kb("VmRSS") / 1024, "peak_mb": _status_kb("VmHWM") / 1024,
        "objects": sum(len(c._objects) for c in caches),
        "held_mb": sum(len(raw) for c in caches for _, raw in c._objects.values()) / 2**20,
        "lists": sum(c.lists for c in caches), "warm_s": warm,
    }
    for cache in caches:
        cache.stop()
    return result


class PlainPacker:
    """The caches' storage before packing: compact JSON, parsed when read."""

    def pack(self, obj: dict) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    def unpack(self, packed: bytes) -> dict:
        return json.loads(packed)


def fill(n: int) -> tuple[object, str, float]:
    """kubesim with N services' objects applied and every workload ready: (kubesim, url, seconds)."""
    from bench.reconcile import create_services, start_kubesim, wait_ready

    sim, url = start_kubesim(gpu_nodes=max(1, n * 2 // 8 + 2), cpu_nodes=n // 40 + 1)
    started = time.monotonic()
    from apps.serving.models import InferenceService
    from apps.serving.names import SERVICE_UID_LABEL
    from apps.serving.rendering import render_service
    from apps.serving.rendering.spec import spec_from_service
    from workers.kube import kube_for

    create_services(40, url, "mirror.local/vllm/vllm-openai")
    templates = [spec_from_service(s) for s in InferenceService.objects.order_by("pk")]
    kube = kube_for(InferenceService.objects.first().cluster)
    shared, labelled = {}, []
    for i in range(n):
        spec = replace(templates[i % len(templates)], name=f"svc-{i}", uid=str(uuid.UUID(int=i + 1)))
        for obj in render_service(spec):
            if SERVICE_UID_LABEL in (obj["metadata"].get("labels") or {}):
                labelled.append(obj)
            else:
                shared[(obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])] = obj
    namespaces = [o for o in shared.values() if o["kind"] == "Namespace"]
    kube.each(kube.apply, namespaces)
    kube.each(kube.apply, [o for o in shared.values() if o["kind"] != "Namespace"])
    keys = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in labelled}
    assert len(keys) == len(labelled), "two copied services' objects share a name"
    for start in range(0, len(labelled), 2000):
        kube.each(kube.apply, labelled[start:start + 2000])
    applied = time.monotonic() - started
    print(f"applied {len(labelled) + len(shared)} objects of {n} services in {applied:.0f} s", flush=True)
    ready = wait_ready(url, 3600)
    print(f"every workload ready {ready:.0f} s later", flush=True)
    return sim, url, applied + ready


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=5000)
    parser.add_argument("--compare-plain", action="store_true",
                        help="also measure caches that keep plain JSON and list in one request (as before)")
    parser.add_argument("--measure", choices=["packed", "plain"], help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure == "plain")))
        return 0

    from bench.reconcile import setup_django, stop

    setup_django()
    sim, _url, _ = fill(args.services)
    try:
        for mode in ("packed", "plain") if args.compare_plain else ("packed",):
            out = subprocess.run([sys.executable, __file__, "--measure", mode], cwd=ROOT, env=dict(os.environ),
                                 check=True, capture_output=True, text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            print(f"worker memory at {args.services} services, caches {mode}: {r['rss_mb']:.0f} MB RSS with warm "
                  f"caches ({r['rss_before_mb']:.0f} MB before them), peak {r['peak_mb']:.0f} MB; {r['objects']} "
                  f"objects held in {r['held_mb']:.1f} MB; {r['lists']} list requests; warm in {r['warm_s']:.1f} s")
    finally:
        stop(sim)
    return 0


if __name__ == "__main__":
    sys.exit(main())
