"""The Endpoints controller: for every Service with a selector, the addresses of its pods, ready or not."""

from __future__ import annotations

import copy

from kubesim.apiserver.errors import ApiError
from kubesim.cluster.controllers.base import Controller, Informer, SelectorIndex, key_of
from kubesim.cluster.controllers.common import pod_active, pod_ready

ENDPOINTS = "v1/endpoints"
COMPONENT = "endpoint-controller"


def resolve_target_port(service_port: dict, pod: dict) -> int | None:
    """A Service port's targetPort as a number for this pod (named ports looked up in its containers)."""
    target = service_port.get("targetPort", service_port.get("port"))
    if isinstance(target, int) or (isinstance(target, str) and target.isdigit()):
        return int(target)
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == target:
                return int(port["containerPort"])
    return None


def _as_endpoint(pod: dict) -> tuple:
    """Everything of a pod that `EndpointsController.subsets` reads: equal views give equal Endpoints."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    return (meta.get("labels"), meta.get("name"), meta.get("uid"), status.get("podIP"), spec.get("nodeName"),
            pod_active(pod), pod_ready(pod), [c.get("ports") for c in spec.get("containers") or []])


def labels_match(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


class EndpointsController(Controller):
    name = COMPONENT

    def __init__(self, api, services: Informer, pods: Informer, endpoints: Informer):
        super().__init__()
        self.api, self.services, self.pods, self.endpoints = api, services, pods, endpoints
        self.selecting = SelectorIndex(services, lambda service: (service.get("spec") or {}).get("selector"))
        services.handlers.append(lambda _t, svc, _old: self.enqueue(key_of(svc)))
        pods.handlers.append(self._pod_changed)

    def _pod_changed(self, event_type: str, pod: dict, old: dict | None) -> None:
        if event_type == "MODIFIED" and old is not None and _as_endpoint(pod) == _as_endpoint(old):
            return  # most pod updates (container states, events of start-up) change no address
        namespace = pod["metadata"].get("namespace") or ""
        for candidate in (pod, old):
            labels = (candidate or {}).get("metadata", {}).get("labels") or {}
            for service in self.selecting.candidates(namespace, labels) if candidate else ():
                if labels_match((service.get("spec") or {}).get("selector") or {}, labels):
                    self.enqueue(key_of(service))

    def subsets(self, service: dict) -> list[dict]:
        spec = service.get("spec") or {}
        namespace = service["metadata"].get("namespace") or "default"
        selector = spec.get("selector") or {}
        groups: dict[tuple, dict] = {}
        pods = sorted(
            (
                p
                for p in self.pods.select(namespace, selector)
                if pod_active(p)
                and (p.get("status") or {}).get("podIP")
                and labels_match(selector, p["metadata"].get("labels") or {})
            ),
            key=lambda p: p["status"]["podIP"],
        )
        for pod in pods:
            ports = []
            for service_port in spec.get("ports") or []:
                number = resolve_target_port(service_port, pod)
                if number is None:
                    continue
                port = {"port": number, "protocol": service_port.get("protocol", "TCP")}
                if service_port.get("name"):
                    port["name"] = service_port["name"]
                ports.append(port)
            if not ports and spec.get("ports"):
                continue  # none of the Service's ports resolve on this pod
            address = {
                "ip": pod["status"]["podIP"],
                "nodeName": pod["spec"].get("nodeName"),
                "targetRef": {
                    "kind": "Pod",
                    "namespace": namespace,
                    "name": pod["metadata"]["name"],
                    "uid": pod["metadata"].get("uid"),
                },
            }
            key = tuple(sorted((p["port"], p.get("name", "")) for p in ports))
            subset = groups.setdefault(key, {"ports": ports} if ports else {})
            # publishNotReadyAddresses (headless Services of LeaderWorkerSets) lists every pod as ready.
            ready = pod_ready(pod) or bool(spec.get("publishNotReadyAddresses"))
            subset.setdefault("addresses" if ready else "notReadyAddresses", []).append(address)
        return list(groups.values())

    async def reconcile(self, key) -> None:
        namespace, name = key
        service = self.services.get(namespace, name)
        existing = self.endpoints.get(namespace, name)
        if service is None:
            if existing is not None:
                try:
                    await self.api.delete(ENDPOINTS, namespace, name)
                except ApiError as error:
                    if error.code != 404:
                        raise
            return
        if not (service.get("spec") or {}).get("selector"):
            return  # Endpoints of selector-less Services are managed by their users
        subsets = self.subsets(service)
        labels = dict(service["metadata"].get("labels") or {})
        if existing is None:
            body = {
                "apiVersion": "v1",
                "kind": "Endpoints",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
            }
            if subsets:
                body["subsets"] = subsets
            self.endpoints.apply("ADDED", await self.api.create(ENDPOINTS, body))
            return
        if (existing.get("subsets") or []) == subsets and (existing["metadata"].get("labels") or {}) == labels:
            return
        body = copy.deepcopy(existing)
        body["metadata"]["labels"] = labels
        if subsets:
            body["subsets"] = subsets
        else:
            body.pop("subsets", None)
        self.endpoints.apply("MODIFIED", await self.api.update(ENDPOINTS, body))
