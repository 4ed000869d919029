"""The controllers' label indexes answer what a scan of the namespace would, through every change."""

from __future__ import annotations

import random

from kubesim.cluster.controllers.base import Informer, SelectorIndex
from kubesim.cluster.controllers.common import selector_matches

LABELS = {"app": ["a", "b", "c"], "tier": ["web", "db"], "team": ["x", "y"]}


def obj(namespace: str, name: str, rv: int, labels: dict, selector: dict | None = None) -> dict:
    out = {"metadata": {"namespace": namespace, "name": name, "resourceVersion": str(rv), "labels": labels}}
    if selector is not None:
        out["spec"] = {"selector": selector}
    return out


def random_labels(rng: random.Random) -> dict:
    return {k: rng.choice(v) for k, v in LABELS.items() if rng.random() < 0.7}


def random_selector(rng: random.Random) -> dict:
    selector = {}
    if rng.random() < 0.8:
        selector["matchLabels"] = random_labels(rng)
    if rng.random() < 0.3:
        selector["matchExpressions"] = [{"key": "tier", "operator": "In", "values": ["web"]}]
    return selector


def test_label_and_selector_indexes_agree_with_a_scan_through_creates_relabels_and_deletes():
    rng = random.Random(7)
    pods, budgets = Informer(None, "v1/pods"), Informer(None, "policy/v1/poddisruptionbudgets")
    selecting = SelectorIndex(budgets, lambda pdb: pdb["spec"]["selector"].get("matchLabels"))
    for rv in range(1, 3001):
        namespace = rng.choice(["ns1", "ns2"])
        if rng.random() < 0.6:
            name = f"pod-{rng.randrange(40)}"
            gone = rng.random() < 0.2 and pods.get(namespace, name) is not None
            pods.apply("DELETED" if gone else "MODIFIED", obj(namespace, name, rv, random_labels(rng)))
        else:
            name = f"pdb-{rng.randrange(15)}"
            gone = rng.random() < 0.2 and budgets.get(namespace, name) is not None
            budgets.apply("DELETED" if gone else "MODIFIED", obj(namespace, name, rv, {}, random_selector(rng)))
        # what each index must find, by scanning everything
        probe_ns = rng.choice(["ns1", "ns2"])
        selector = random_selector(rng)
        scanned = {p["metadata"]["name"] for p in pods.list(probe_ns) if selector_matches(selector, p["metadata"]["labels"])}
        found = {p["metadata"]["name"] for p in pods.select(probe_ns, selector.get("matchLabels"))
                 if selector_matches(selector, p["metadata"]["labels"])}
        assert found == scanned
        pod_labels = random_labels(rng)
        scanned = {b["metadata"]["name"] for b in budgets.list(probe_ns)
                   if selector_matches(b["spec"]["selector"], pod_labels)}
        candidates = [b["metadata"]["name"] for b in selecting.candidates(probe_ns, pod_labels)]
        assert len(candidates) == len(set(candidates))
        assert {n for n in candidates if selector_matches(budgets.get(probe_ns, n)["spec"]["selector"], pod_labels)} \
            == scanned


def test_a_selector_is_filed_under_its_rarest_label_so_a_pod_finds_only_its_own():
    services = Informer(None, "v1/services")
    selecting = SelectorIndex(services, lambda svc: svc["spec"]["selector"])
    for i in range(50):
        services.apply("ADDED", obj("ns", f"svc-{i}", i + 1, {}, {"managed-by": "cp", "instance": f"svc-{i}"}))
    found = selecting.candidates("ns", {"managed-by": "cp", "instance": "svc-30", "pod-template-hash": "abc"})
    # svc-0 came first, when no label was rarer than another; every later one is filed under its own instance
    assert sorted(s["metadata"]["name"] for s in found) == ["svc-0", "svc-30"]


def test_a_pod_relabelled_out_of_a_selector_leaves_its_endpoints_and_its_budget(make_cluster):
    from kubernetes import client

    from tests.kubesim.cluster_support import deployment, is_ready, service_of
    from tests.polling import wait_for

    cluster, ns = make_cluster(), "default"
    policy = client.PolicyV1Api(cluster.api_client)
    cluster.apps.create_namespaced_deployment(ns, deployment("web", replicas=2))
    cluster.core.create_namespaced_service(ns, service_of("web", [{"name": "http", "port": 80, "targetPort": "http"}]))
    policy.create_namespaced_pod_disruption_budget(ns, {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}})

    def ready(selector):
        return [p for p in cluster.core.list_namespaced_pod(ns, label_selector=selector).items if is_ready(p)]

    def addresses():
        subsets = cluster.core.read_namespaced_endpoints("web", ns).subsets or []
        return sorted(a.ip for s in subsets for a in s.addresses or [])

    wait_for(lambda: len(ready("app=web")) == 2 and len(addresses()) == 2, message="two pods behind the Service")
    moved = ready("app=web")[0]
    cluster.core.patch_namespaced_pod(moved.metadata.name, ns, {"metadata": {"labels": {"app": "elsewhere"}}})
    # the ReplicaSet replaces the pod it no longer selects; the Service and the budget follow the labels
    wait_for(lambda: len(ready("app=web")) == 2, message="a replacement Ready")
    wait_for(lambda: addresses() == sorted(p.status.pod_ip for p in ready("app=web")),
             message="the Endpoints list the pods labelled app=web only")
    assert moved.status.pod_ip not in addresses()
    status = wait_for(lambda: (s := policy.read_namespaced_pod_disruption_budget_status("web", ns).status)
                      and s.expected_pods == 2 and s.current_healthy == 2 and s, message="the budget counts two")
    assert status.disruptions_allowed == 1
