"""The resource metrics API (`metrics.k8s.io/v1beta1`) that metrics-server serves: `kubectl top nodes/pods`.

Usage comes from the simulation, per running container: a simulated engine uses 0.25 CPU idle up to 1 CPU
while its batch is full (its step loop keeps a core busy) and 6 GiB of host memory (tokenizer, CUDA host
allocations); the generic workload 1m CPU plus 2m per request in flight and 12 MiB. Every figure varies by up to
±5 % per pod (from its uid) and never exceeds the container's limits. A node's usage is the sum over its running
pods plus 120m CPU and 900 MiB for the system daemons. Only pods with running containers and Ready nodes are
listed, as metrics-server lists what it has scraped.
"""

from __future__ import annotations

import hashlib
import json
import time

from aiohttp import web

from kubesim.apiserver.quantities import parse_quantity
from kubesim.apiserver.resources import ResourceType
from kubesim.apiserver.selectors import parse_label_selector
from kubesim.cluster.nodes import node_is_ready

GROUP, VERSION = "metrics.k8s.io", "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
BASE = f"/apis/{GROUP}/{VERSION}"
WINDOW = "10.5s"
MIB = 1024**2
SYSTEM_CPU_MILLI, SYSTEM_MEMORY = 120, 900 * MIB
ENGINE_CPU_IDLE, ENGINE_CPU_BUSY, ENGINE_MEMORY = 250, 1000, 6 * 1024 * MIB
GENERIC_CPU, GENERIC_CPU_PER_REQUEST, GENERIC_MEMORY = 1, 2, 12 * MIB


class MetricsType(ResourceType):
    """A read-only kind of the metrics API (discovery lists get and list only)."""

    @property
    def verbs(self) -> list[str]:
        return ["get", "list"]


TYPES = [MetricsType(GROUP, VERSION, "nodes", "NodeMetrics", namespaced=False),
         MetricsType(GROUP, VERSION, "pods", "PodMetrics")]


def _jitter(uid: str) -> float:
    return 0.95 + 0.1 * (int(hashlib.sha256(uid.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF)


def container_usage(container_runtime, uid: str) -> tuple[int, int]:
    """(nanocores, bytes) a running container uses now."""
    workload = container_runtime.workload
    usage = getattr(workload, "gpu_usage", None)
    if callable(usage):
        busy = usage()[1]
        milli, memory = ENGINE_CPU_IDLE + (ENGINE_CPU_BUSY - ENGINE_CPU_IDLE) * busy, ENGINE_MEMORY
    else:
        in_flight = getattr(workload, "in_flight", 0)
        milli = GENERIC_CPU + GENERIC_CPU_PER_REQUEST * (in_flight if isinstance(in_flight, int) else 0)
        memory = GENERIC_MEMORY
    factor = _jitter(uid + container_runtime.name)
    nanocores, memory = int(milli * 1e6 * factor), int(memory * factor)
    limits = (container_runtime.spec.get("resources") or {}).get("limits") or {}
    if "cpu" in limits:
        nanocores = min(nanocores, int(parse_quantity(str(limits["cpu"])) * 1e9))
    if "memory" in limits:
        memory = min(memory, int(parse_quantity(str(limits["memory"]))))
    return nanocores, memory


def _cpu(nanocores: int) -> str:
    return f"{nanocores}n"


def _memory(size: int) -> str:
    return f"{size // 1024}Ki"


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class ResourceMetrics:
    """Serves NodeMetrics and PodMetrics from the kubelet's running pods."""

    def __init__(self, store, kubelet):
        self.store = store
        self.kubelet = kubelet

    def install(self, server) -> None:
        for rt in TYPES:
            server.store.registry.add(rt)
        for path, handler in ((f"{BASE}/nodes", self.nodes), (f"{BASE}/nodes/{{name}}", self.node),
                              (f"{BASE}/pods", self.pods), (f"{BASE}/namespaces/{{namespace}}/pods", self.pods),
                              (f"{BASE}/namespaces/{{namespace}}/pods/{{name}}", self.pod)):
            server.add_route("GET", path, handler)

    def _pod_metrics(self, runtime) -> dict | None:
        running = [c for c in runtime.containers if c.workload is not None]
        if not running:
            return None
        labels = dict(runtime.pod["metadata"].get("labels") or {})
        return {"kind": "PodMetrics", "apiVersion": API_VERSION,
                "metadata": {"name": runtime.name, "namespace": runtime.namespace, "creationTimestamp": _stamp(),
                             "labels": labels},
                "timestamp": _stamp(), "window": WINDOW,
                "containers": [{"name": c.name, "usage": dict(zip(("cpu", "memory"), _format(
                    *container_usage(c, runtime.uid)), strict=True))} for c in running]}

    def _node_metrics(self, node: dict) -> dict:
        name = node["metadata"]["name"]
        cpu, memory = SYSTEM_CPU_MILLI * 1_000_000, SYSTEM_MEMORY
        for runtime in self.kubelet.runtimes.values():
            if runtime.node_name == name:
                for c in runtime.containers:
                    if c.workload is not None:
                        used = container_usage(c, runtime.uid)
                        cpu, memory = cpu + used[0], memory + used[1]
        return {"kind": "NodeMetrics", "apiVersion": API_VERSION,
                "metadata": {"name": name, "creationTimestamp": _stamp(),
                             "labels": dict(node["metadata"].get("labels") or {})},
                "timestamp": _stamp(), "window": WINDOW, "usage": {"cpu": _cpu(cpu), "memory": _memory(memory)}}

    @staticmethod
    def _list(kind: str, items: list[dict]) -> web.Response:
        body = {"kind": kind, "apiVersion": API_VERSION, "metadata": {}, "items": items}
        return web.Response(body=json.dumps(body).encode(), content_type="application/json")

    def _ready_nodes(self, selector: str | None) -> list[dict]:
        nodes, _ = self.store.list("v1/nodes", None, selector)
        return [n for n in nodes if node_is_ready(n)]

    async def nodes(self, request: web.Request) -> web.Response:
        items = [self._node_metrics(n) for n in self._ready_nodes(request.query.get("labelSelector"))]
        return self._list("NodeMetricsList", items)

    async def node(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        node = next((n for n in self._ready_nodes(None) if n["metadata"]["name"] == name), None)
        if node is None:
            return _not_found("nodes", name)
        return web.Response(body=json.dumps(self._node_metrics(node)).encode(), content_type="application/json")

    async def pods(self, request: web.Request) -> web.Response:
        namespace = request.match_info.get("namespace")
        match = parse_label_selector(request.query.get("labelSelector"))
        items = []
        for (ns, _name), runtime in sorted(self.kubelet.runtimes.items()):
            if namespace and ns != namespace:
                continue
            if match and not match(runtime.pod):
                continue
            metrics = self._pod_metrics(runtime)
            if metrics is not None:
                items.append(metrics)
        return self._list("PodMetricsList", items)

    async def pod(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        runtime = self.kubelet.runtimes.get((namespace, name))
        metrics = self._pod_metrics(runtime) if runtime is not None else None
        if metrics is None:
            return _not_found("pods", name)
        return web.Response(body=json.dumps(metrics).encode(), content_type="application/json")


def _format(nanocores: int, size: int) -> tuple[str, str]:
    return _cpu(nanocores), _memory(size)


def _not_found(plural: str, name: str) -> web.Response:
    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
              "message": f'{plural}.{GROUP} "{name}" not found', "reason": "NotFound",
              "details": {"name": name, "group": GROUP, "kind": plural}, "code": 404}
    return web.Response(status=404, body=json.dumps(status).encode(), content_type="application/json")
