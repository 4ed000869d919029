"""Manifests and checks the simulated-cluster tests share (the cluster itself is the `make_cluster` fixture
in tests/conftest.py)."""

from __future__ import annotations

from kubernetes import client

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def deployment(
    name: str,
    replicas: int = 1,
    image: str = "nginx:1.27",
    gpus: int = 0,
    node_selector: dict | None = None,
    tolerations: list | None = None,
    strategy: dict | None = None,
    command: list[str] | None = None,
) -> dict:
    """An apps/v1 Deployment whose container may ask for GPUs."""
    labels = {"app": name}
    container = {"name": "app", "image": image, "ports": [{"containerPort": 8080, "name": "http"}]}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if command:
        container["command"] = command
    spec = {"containers": [container]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }
    if strategy:
        body["spec"]["strategy"] = strategy
    return body


def pod_manifest(
    name: str,
    gpus: int = 0,
    node_selector: dict | None = None,
    tolerations: list | None = None,
    image: str = "nginx:1.27",
    command: list[str] | None = None,
    labels: dict | None = None,
) -> dict:
    container = {"name": "app", "image": image}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if command:
        container["command"] = command
    spec = {"containers": [container]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def is_ready(pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))


def events_for(core: client.CoreV1Api, namespace: str, name: str, reason: str | None = None) -> list:
    events = core.list_namespaced_event(namespace).items
    return [e for e in events if e.involved_object.name == name and (reason is None or e.reason == reason)]
