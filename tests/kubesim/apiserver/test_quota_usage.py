"""The quota usage ledger agrees with a sum over the namespace's pods through every kind of change."""

from __future__ import annotations

import random

from kubesim.apiserver.admission.quota import namespace_usage_of, pod_usage
from kubesim.apiserver.objects import pod_active
from kubesim.apiserver.store import Store

ITEMS = ["limits.nvidia.com/gpu", "pods", "requests.cpu", "requests.memory", "requests.nvidia.com/gpu"]


def pod(name: str, cpu: str, gpus: int) -> dict:
    resources = {"requests": {"cpu": cpu, "memory": "1Gi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]}}


def summed(store: Store, namespace: str) -> dict[str, int]:
    """What the namespace's active pods charge, added up pod by pod (what admission did before the ledger)."""
    pods, _ = store.list("v1/pods", namespace)
    total = dict.fromkeys(ITEMS, 0)
    for p in pods:
        if pod_active(p):
            for item, units in pod_usage(p, ITEMS).items():
                total[item] += units
    return total


def test_the_ledger_follows_creates_status_updates_finished_pods_deletions_and_a_restore():
    store, rng = Store(seed=1), random.Random(3)
    for namespace in ("a", "b"):
        store.create("v1/namespaces", None, {"metadata": {"name": namespace}})
    ledger = namespace_usage_of(store)
    assert namespace_usage_of(store) is ledger  # one per store
    store.create("v1/pods", "a", pod("before", "500m", 1))
    for step in range(400):
        namespace, name = rng.choice(["a", "b"]), f"p{rng.randrange(25)}"
        exists = store.exists("v1/pods", namespace, name)
        action = rng.random()
        if not exists:
            store.create("v1/pods", namespace, pod(name, rng.choice(["100m", "1", "2500m"]), rng.randrange(3)))
        elif action < 0.4:  # a status update: running, then perhaps finished
            phase = rng.choice(["Running", "Running", "Succeeded", "Failed"])
            store.update_status("v1/pods", namespace, name, {"status": {"phase": phase}})
        else:
            store.delete("v1/pods", namespace, name)
        for ns in ("a", "b"):
            assert ledger.usage(ns, ITEMS) == summed(store, ns), f"step {step}, namespace {ns}"
    snapshot = store.snapshot()
    other = Store(seed=2)
    other_ledger = namespace_usage_of(other)
    other.restore(snapshot)
    for ns in ("a", "b"):
        assert other_ledger.usage(ns, ITEMS) == summed(store, ns)
    assert ledger.usage("a", ["pods", "no-such-item"]) == {"pods": summed(store, "a")["pods"]}
