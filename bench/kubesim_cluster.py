"""Benchmark of kubesim's simulated cluster: 500 Deployments (2,000 pods) to Ready with --fast-start,
and the scheduler's placements per second.

    .venv/bin/python bench/kubesim_cluster.py [--deployments 500] [--replicas 4] [--nodes cpu:20]

The API server, controllers and kubelet run in-process on their own event loop thread (as in the
tests); Deployments are created over HTTP with the official client, and readiness is read back over
HTTP. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kubernetes import client

from kubesim.apiserver.quantities import pod_requests
from kubesim.apiserver.server import Server
from kubesim.cluster.assembly import Cluster, ClusterConfig
from kubesim.cluster.nodes import build_nodes
from kubesim.cluster.placement import NodeUsage, place


def deployment(name: str, replicas: int) -> dict:
    labels = {"app": name}
    container = {"name": "app", "image": "nginx:1.27",
                 "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}}}}


def end_to_end(deployments: int, replicas: int, nodes: str) -> None:
    server = Server(port=0, seed=1)
    cluster = Cluster(server, ClusterConfig(nodes=nodes, fast_start=True, seed=1))
    cluster.install()
    server.start_in_thread()
    while cluster.ready is None or not cluster.ready.is_set():
        time.sleep(0.05)
    configuration = client.Configuration()
    configuration.host = server.url
    apps = client.AppsV1Api(client.ApiClient(configuration))
    total = deployments * replicas

    started = time.monotonic()
    for index in range(deployments):
        apps.create_namespaced_deployment("default", deployment(f"bench-{index:04d}", replicas))
    created = time.monotonic() - started
    ready = 0
    while True:
        items = apps.list_namespaced_deployment("default").items
        ready = sum((d.status.available_replicas or 0) for d in items)
        if ready >= total:
            break
        if time.monotonic() - started > 600:
            print(f"gave up after 600 s with {ready}/{total} pods Ready")
            break
        time.sleep(0.5)
    elapsed = time.monotonic() - started
    scheduler = cluster.scheduler
    print(f"{deployments} Deployments x {replicas} replicas = {total} pods on nodes {nodes}")
    print(f"  created all Deployments over HTTP in {created:.1f} s")
    print(f"  all {ready} pods Ready (Deployments available) after {elapsed:.1f} s "
          f"({ready / elapsed:.0f} pods/s end to end)")
    print(f"  scheduler: {scheduler.placements} placements, {scheduler.placement_seconds:.2f} s deciding "
          f"= {scheduler.placements / max(scheduler.placement_seconds, 1e-9):.0f} placements/s")
    server.stop_in_thread()


def scheduler_only(pods: int, nodes: str) -> None:
    """Pure placement throughput: `place()` over the node set with usage kept incrementally."""
    node_objects = build_nodes(nodes)
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "image": "x", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                                   "limits": {"nvidia.com/gpu": "0"}}}]}}
    requests = pod_requests(pod)
    usage: dict[str, NodeUsage] = {}
    started = time.perf_counter()
    placed = 0
    for _ in range(pods):
        name = place(pod, node_objects, usage)
        usage[name] = (usage.get(name) or NodeUsage()).plus(requests)
        placed += 1
    seconds = time.perf_counter() - started
    print(f"scheduler alone: {placed} placements over {len(node_objects)} nodes in {seconds:.2f} s "
          f"= {placed / seconds:.0f} placements/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployments", type=int, default=500)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--nodes", default="cpu:20", help="enough room for the pods (110 pods per node)")
    args = parser.parse_args()
    scheduler_only(2000, args.nodes)
    end_to_end(args.deployments, args.replicas, args.nodes)


if __name__ == "__main__":
    main()
