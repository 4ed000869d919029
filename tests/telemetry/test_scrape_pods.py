"""Which pods the scraper reads, on which port, under which pool; and how a cycle is cut into write chunks."""

from __future__ import annotations

from workers.telemetry import EnginePod, chunks, engine_pods

UID = "5f2c1e4a-8d3b-4c6e-9a71-0b2d4e6f8a10"


def pod(name, component="engine", uid=UID, ready=True, ports=None, extra_labels=None, containers=None):
    labels = {"app.kubernetes.io/managed-by": "controlplane", "app.kubernetes.io/component": component,
              "controlplane.io/service-uid": uid, **(extra_labels or {})}
    ports = ports if ports is not None else [{"name": "http", "containerPort": 8000}]
    return {
        "metadata": {"name": name, "namespace": "tenant-acme", "labels": labels},
        "spec": {"nodeName": "gpu-0", "containers": containers or [{"name": "engine", "ports": ports}]},
        "status": {"phase": "Running" if ready else "Pending",
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_engine_prefill_and_decode_pods_of_known_services_are_scraped_on_their_http_port():
    pods = [
        pod("chat-a"),
        pod("split-prefill-a", component="prefill", ports=[{"name": "kv", "containerPort": 5557},
                                                           {"name": "http", "containerPort": 8100}]),
        pod("split-decode-a", component="decode"),
        pod("chat-router", component="router"),
        pod("stranger", uid="00000000-0000-0000-0000-000000000000"),
    ]

    found = engine_pods(pods, {UID: 7})

    assert [(p.name, p.role, p.port, p.service_id) for p in found] == [
        ("chat-a", "engine", 8000, 7), ("split-prefill-a", "prefill", 8100, 7), ("split-decode-a", "decode", 8000, 7)]


def test_only_the_leader_of_a_leader_worker_set_group_is_scraped_and_its_pool_is_leader():
    # The renderer labels each side of the group with its rank role; LeaderWorkerSet adds name and index.
    lws = {"leaderworkerset.sigs.k8s.io/name": "big"}
    pods = [
        pod("big-0", extra_labels={**lws, "leaderworkerset.sigs.k8s.io/worker-index": "0",
                                   "controlplane.io/role": "leader"}),
        pod("big-0-1", extra_labels={**lws, "leaderworkerset.sigs.k8s.io/worker-index": "1",
                                     "controlplane.io/role": "worker"}),
    ]

    assert [(p.name, p.role) for p in engine_pods(pods, {UID: 1})] == [("big-0", "leader")]


def test_pods_not_ready_are_listed_but_marked_and_the_engine_container_wins():
    sidecar_first = [{"name": "proxy", "ports": [{"name": "http", "containerPort": 9000}]},
                     {"name": "engine", "ports": [{"name": "http", "containerPort": 30000}]}]
    pods = [pod("starting", ready=False), pod("sglang", containers=sidecar_first)]

    found = {p.name: p for p in engine_pods(pods, {UID: 1})}

    assert found["starting"].ready is False
    assert found["sglang"].port == 30000


def test_a_cycle_is_written_in_chunks_of_whole_services():
    pods_of = {1: ["a", "b"], 2: ["c"], 3: ["d", "e", "f"], 4: []}

    assert chunks([1, 2, 3, 4], pods_of, 3) == [[1, 2], [3], [4]]
    assert chunks([4], pods_of, 3) == [[4]]
    assert EnginePod(1, "ns", "p", "engine", "", 8000, True).ready
