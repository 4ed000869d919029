"""Manifests, container argv and checks the simulated-cluster and engine tests share (the cluster itself is
the `make_cluster` fixture in tests/conftest.py)."""

from __future__ import annotations

from kubernetes import client

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def sglang_argv(model: str, *flags: str) -> list[str]:
    """An SGLang container's argv: `python3 -m sglang.launch_server --model-path <model>` and `flags`."""
    return ["python3", "-m", "sglang.launch_server", "--model-path", model, *flags]


def deployment_of(name: str, replicas: int, pod_spec: dict, pod_annotations: dict | None = None) -> dict:
    """An apps/v1 Deployment labelled and selecting `app: name` whose pods run `pod_spec`."""
    labels = {"app": name}
    pod_metadata = {"labels": labels}
    if pod_annotations:
        pod_metadata["annotations"] = pod_annotations
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": pod_metadata, "spec": pod_spec},
        },
    }


def service_of(name: str, ports: list[dict]) -> dict:
    """A v1 Service `name` in front of the pods labelled `app: name`."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": ports},
    }


def _pod_spec(container: dict, gpus: int, command, node_selector, tolerations) -> dict:
    """A pod spec of one container, asking for `gpus` GPUs; tolerations are set unless None."""
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if command:
        container["command"] = command
    spec = {"containers": [container]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return spec


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
    container = {"name": "app", "image": image, "ports": [{"containerPort": 8080, "name": "http"}]}
    body = deployment_of(name, replicas, _pod_spec(container, gpus, command, node_selector, tolerations or None))
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
    spec = _pod_spec({"name": "app", "image": image}, gpus, command, node_selector, tolerations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def is_ready(pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))


def only_ready_pod(core: client.CoreV1Api, namespace: str, selector: str):
    """The one pod matching `selector` once it is Ready; None while there is none, several or it is not Ready."""
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    return pods[0] if len(pods) == 1 and is_ready(pods[0]) else None


def replacement_of(core: client.CoreV1Api, namespace: str, selector: str, first):
    """The one Ready pod matching `selector` once it is another pod than `first`; None until then."""
    pod = only_ready_pod(core, namespace, selector)
    return pod if pod is not None and pod.metadata.name != first.metadata.name else None


def events_for(core: client.CoreV1Api, namespace: str, name: str, reason: str | None = None) -> list:
    events = core.list_namespaced_event(namespace).items
    return [e for e in events if e.involved_object.name == name and (reason is None or e.reason == reason)]
