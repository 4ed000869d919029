"""A worker's memory with warm watch caches at N services: the RSS of a process that imports what a worker
imports and holds one watch cache per kind the reconcile reads (its 12 managed kinds and Pods).

    python bench/worker_memory.py [--services 5000] [--compare-plain]

The cluster is filled faster than through the workers: 40 services are created through the API (every
deployment mode in every one of 10 tenants) and run on a small simulated kubesim until Ready; their rendered
specs are copied to N services (new names and uids: the objects of real services of those modes) and
applied with the workers' own client (`Kube.each`, server-side apply) to a kubesim `--api-only`, with
copies of the templates' Pods as kubesim's kubelet left them (status included). Then a fresh process
(`--measure`) imports Django, the Celery app and every task module, reads its RSS, starts the caches, waits
until every one is live, and prints its RSS, its peak RSS (VmHWM: the relist's transient included) and the
bytes the caches hold.
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
    from bench.common import setup_django

    setup_django("bench/worker_memory.py")
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
    """An API-only kubesim holding N services' objects and their Ready pods: (kubesim, url, seconds).

    Simulating thousands of pods on this machine takes longer than a worker needs to be measured, so the
    40 template services run on a small simulated kubesim first; their pods (with the status kubesim's
    kubelet gave them) are copied with the services to an API-only kubesim (`serve --api-only`)."""
    from django.utils import timezone

    from apps.clusters.models import Cluster
    from apps.serving.models import InferenceService
    from apps.serving.names import SERVICE_UID_LABEL
    from apps.serving.rendering import render_service
    from apps.serving.rendering.spec import spec_from_service
    from bench.reconcile import create_services, start_kubesim, stop, wait_ready
    from workers.kube import kube_for

    started = time.monotonic()
    small, small_url = start_kubesim(gpu_nodes=12, cpu_nodes=2)
    try:
        create_services(40, small_url, "mirror.local/vllm/vllm-openai")
        templates = [spec_from_service(s) for s in InferenceService.objects.order_by("pk")]
        kube = kube_for(Cluster.objects.get())
        apply_all(kube, [obj for spec in templates for obj in render_service(spec)], SERVICE_UID_LABEL)
        wait_ready(small_url, 600)
        pods = {spec.uid: kube.list("v1", "Pod", namespace=spec.namespace,
                                    label_selector=f"{SERVICE_UID_LABEL}={spec.uid}") for spec in templates}
    finally:
        stop(small)
    print(f"40 template services and their {sum(map(len, pods.values()))} pods in {time.monotonic() - started:.0f} s",
          flush=True)
    sim, url = start_kubesim(gpu_nodes=1, api_only=True)
    Cluster.objects.update(api_url=url, updated=timezone.now())
    kube = kube_for(Cluster.objects.get())
    objects, copies = [], []
    for i in range(n):
        template = templates[i % len(templates)]
        spec = replace(template, name=f"svc-{i}", uid=str(uuid.UUID(int=i + 1)))
        objects.extend(render_service(spec))
        for pod in pods[template.uid]:
            text = json.dumps(pod).replace(template.uid, spec.uid)
            text = text.replace(f'"{template.name}-', f'"{spec.name}-').replace(f'"{template.name}"', f'"{spec.name}"')
            copy = json.loads(text)
            for field in ("uid", "resourceVersion", "creationTimestamp", "managedFields"):
                copy["metadata"].pop(field, None)
            copies.append(copy)
    apply_all(kube, objects, SERVICE_UID_LABEL)
    core = kube.core

    def create_pod(pod: dict) -> None:
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        made = json.loads(core.create_namespaced_pod(namespace, pod, _preload_content=False).data)
        pod["metadata"]["resourceVersion"] = made["metadata"]["resourceVersion"]
        core.replace_namespaced_pod_status(name, namespace, pod, _preload_content=False)  # as its kubelet left it

    for start in range(0, len(copies), 2000):
        kube.each(create_pod, copies[start:start + 2000])
    seconds = time.monotonic() - started
    print(f"{len(objects)} objects and {len(copies)} pods of {n} services on kubesim --api-only in {seconds:.0f} s",
          flush=True)
    return sim, url, seconds


def apply_all(kube, objects: list[dict], uid_label: str) -> None:
    """Server-side apply: the shared objects once each (Namespaces first), then the services' objects."""
    shared, labelled = {}, []
    for obj in objects:
        if uid_label in (obj["metadata"].get("labels") or {}):
            labelled.append(obj)
        else:
            shared[(obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])] = obj
    kube.each(kube.apply, [o for o in shared.values() if o["kind"] == "Namespace"])
    kube.each(kube.apply, [o for o in shared.values() if o["kind"] != "Namespace"])
    keys = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in labelled}
    assert len(keys) == len(labelled), "two copied services' objects share a name"
    for start in range(0, len(labelled), 2000):
        kube.each(kube.apply, labelled[start:start + 2000])


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
