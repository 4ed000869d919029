"""ExtendedResourceToleration, a mutating admission plugin of kube-apiserver: a pod requesting an
extended resource (`nvidia.com/gpu`) gets a toleration for the taint of that name, as on GKE and AKS,
so a GPU request alone is enough to land on GPU nodes."""

from __future__ import annotations

from ..quantities import pod_requests
from . import AdmissionRequest

POD_KEY = ("", "v1", "pods")


def extended_resource_tolerations(pod: dict) -> list[dict]:
    """Tolerations the plugin adds for the extended resources `pod` requests and does not tolerate yet."""
    existing = (pod.get("spec") or {}).get("tolerations") or []
    requests = pod_requests(pod)
    added = []
    for name in sorted(requests):
        if "/" not in name or name.startswith("kubernetes.io/") or not requests[name]:
            continue
        toleration = {"key": name, "operator": "Exists", "effect": "NoSchedule"}
        if toleration not in existing:
            added.append(toleration)
    return added


def extended_resource_toleration(request: AdmissionRequest) -> None:
    """The plugin: adds the tolerations to a pod being created."""
    if request.operation != "CREATE" or request.resource.key != POD_KEY or request.object is None:
        return
    added = extended_resource_tolerations(request.object)
    if added:
        request.object.setdefault("spec", {}).setdefault("tolerations", []).extend(added)
