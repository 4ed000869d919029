"""The tenant namespace's `tenant-isolation` policy admits the inference gateway's pods (by namespace and
pod labels, to engine and router ports only) and nothing else new, enforced by kubesim on pods' own
addresses; the labels and namespace are the ones the gateway's install gives its pods."""

from __future__ import annotations

from pathlib import Path

import yaml
from kubernetes import client

from apps.serving.names import GATEWAY_NAMESPACE, GATEWAY_POD_LABELS
from apps.serving.rendering.extras import isolation_policy
from tests.kubesim.cluster.test_podnet import get, pod, ready_ip

BASE = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "base"


def test_the_install_gives_the_gateway_the_identity_the_policy_admits():
    deployment = next(d for d in yaml.safe_load_all((BASE / "gateway.yaml").read_text())
                      if d and d["kind"] == "Deployment")
    assert deployment["spec"]["template"]["metadata"]["labels"] == GATEWAY_POD_LABELS
    assert yaml.safe_load((BASE / "kustomization.yaml").read_text())["namespace"] == GATEWAY_NAMESPACE


def test_the_gateway_gets_through_to_engine_ports_and_nothing_else_new_does(make_cluster):
    cluster = make_cluster(nodes="l4-24gb:1x1", pod_network="loopback")
    core = cluster.core
    for namespace in ("tenant-acme", "tenant-globex", GATEWAY_NAMESPACE):
        core.create_namespace({"metadata": {"name": namespace}})
    client.NetworkingV1Api(cluster.api_client).create_namespaced_network_policy(
        "tenant-acme", isolation_policy("acme", "tenant-acme", ()))
    # An engine's port and a port that is neither an engine's nor a router's.
    core.create_namespaced_pod("tenant-acme", pod("engine", "tenant-acme", {"app": "e"}, "nginx:1.27", [], 8000))
    core.create_namespaced_pod("tenant-acme", pod("debug", "tenant-acme", {"app": "d"}, "nginx:1.27", [], 9000))
    core.create_namespaced_pod(GATEWAY_NAMESPACE, pod("gateway", GATEWAY_NAMESPACE, GATEWAY_POD_LABELS,
                                                      "nginx:1.27", [], 8080))
    core.create_namespaced_pod(GATEWAY_NAMESPACE, pod("web", GATEWAY_NAMESPACE, {"app": "web"}, "nginx:1.27",
                                                      [], 8080))
    # Another tenant's pod wearing the gateway's labels is still another namespace's pod.
    core.create_namespaced_pod("tenant-globex", pod("impostor", "tenant-globex", GATEWAY_POD_LABELS,
                                                    "nginx:1.27", [], 8080))
    engine, debug = ready_ip(core, "tenant-acme", "engine"), ready_ip(core, "tenant-acme", "debug")
    gateway, web = ready_ip(core, GATEWAY_NAMESPACE, "gateway"), ready_ip(core, GATEWAY_NAMESPACE, "web")
    impostor = ready_ip(core, "tenant-globex", "impostor")
    assert get(engine, 8000, "/", source=gateway) is not None
    assert get(engine, 8000, "/", source=impostor) is None
    assert get(engine, 8000, "/", source=web) is None
    assert get(debug, 9000, "/", source=gateway) is None
    assert get(debug, 9000, "/") is not None  # the port answers: the policy is what refused
