"""The kubelet: all nodes' kubelets in one, starting a PodRuntime for each bound pod and stopping it on
deletion or node failure; it hands out pod IPs and answers the proxies' and `kubectl logs`' lookups.
The container state machine, probes and back-off are in `kubesim.cluster.pod_runtime`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import aiohttp

from kubesim.cluster.gpus import GpuDevices
from kubesim.cluster.pod_runtime import COMPONENT, KubeletConfig, PodRuntime
from kubesim.cluster.podnet import PodListeners
from kubesim.cluster.weights import FilledCaches
from kubesim.workload import ClusterView, WorkloadFactory

log = logging.getLogger(__name__)
ADMISSION_REASON = "UnexpectedAdmissionError"  # what a kubelet's device or resource admission refusal shows


class Kubelet:
    """All nodes' kubelets in one: starts runtimes for bound pods, stops them on deletion or node failure."""

    def __init__(self, api, recorder, config: KubeletConfig, cluster_view: ClusterView | None = None,
                 workload_for: WorkloadFactory | None = None):
        self.api = api
        self.workload_for = workload_for  # the engines' factory; None runs every image as the generic workload
        self.recorder = recorder
        self.config = config
        self.cluster_view = cluster_view
        self.runtimes: dict[tuple[str, str], PodRuntime] = {}
        self.failed_nodes: set[str] = set()
        self._ips: dict[str, dict[tuple[str, str], int]] = {}
        self._session: aiohttp.ClientSession | None = None
        self._publishing: dict[tuple[str, str], asyncio.Event] = {}
        self.gpus = GpuDevices()  # which container holds which GPU of its node (nvidia-smi, dcgm-exporter)
        # Set by the cluster: serves pods' ports on their IPs when those are loopback addresses.
        self.listeners: PodListeners | None = None
        # Set by the cluster: the admission of a node's kubelet (pod, node) -> why it refuses the pod, or None.
        self.admission: Callable[[dict, dict], str | None] | None = None
        self._rejected: set[str] = set()
        self.filled_caches = FilledCaches()  # the cluster caches whose weights a pod downloaded

    def session(self) -> aiohttp.ClientSession:
        """One HTTP client for all probes."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    # --- addresses ------------------------------------------------------------------------------

    @staticmethod
    def node_ip(node: dict) -> str:
        for address in (node.get("status") or {}).get("addresses") or []:
            if address.get("type") == "InternalIP":
                return address["address"]
        return "10.0.0.1"

    def allocate_ip(self, node: dict, key: tuple[str, str]) -> str:
        cidr = (node.get("spec") or {}).get("podCIDR") or "10.244.0.0/24"
        prefix = cidr.rsplit(".", 1)[0]
        taken = self._ips.setdefault(node["metadata"]["name"], {})
        if key not in taken:
            used = set(taken.values())
            taken[key] = next(i for i in range(2, 100_000) if i not in used)
        host = taken[key]
        # A /24 has 254 hosts; spill over into the next octets for nodes running more pods than that.
        if host < 255:
            return f"{prefix}.{host}"
        return f"{prefix.rsplit('.', 1)[0]}.{host // 254 + 100}.{host % 254 + 1}"

    def release_ip(self, node: dict, key: tuple[str, str]) -> None:
        if self.listeners is not None:
            self.listeners.close(key)
        self._ips.get(node["metadata"]["name"], {}).pop(key, None)

    # --- pods -----------------------------------------------------------------------------------

    async def sync_pod(self, pod: dict, node: dict | None) -> None:
        """Start a runtime for a pod bound to a healthy node (idempotent)."""
        meta = pod["metadata"]
        key = (meta.get("namespace") or "default", meta["name"])
        existing = self.runtimes.get(key)
        if existing is not None:
            if existing.uid == meta.get("uid"):
                existing.pod = pod
                return
            await self.remove_pod(*key)
        if node is None or node["metadata"]["name"] in self.failed_nodes:
            return
        if meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return
        refusal = self.admission(pod, node) if self.admission is not None else None
        if refusal is not None:
            await self.reject(pod, node, refusal)
            return
        runtime = PodRuntime(self, pod, node)
        self.runtimes[key] = runtime
        self.gpus.allocate(pod, node)
        runtime.task = asyncio.get_running_loop().create_task(self._run(runtime))

    async def reject(self, pod: dict, node: dict, refusal: str) -> None:
        """Fail a pod the node's admission refuses, as a kubelet does: phase Failed with the reason, an event."""
        meta = pod["metadata"]
        if meta.get("uid") in self._rejected:
            return
        self._rejected.add(meta.get("uid"))
        message = f"Pod was rejected: {refusal}"

        def failed(previous: dict) -> dict:
            return {**previous, "phase": "Failed", "reason": ADMISSION_REASON, "message": message}

        await self.api.set_status("v1/pods", meta.get("namespace") or "default", meta["name"], failed,
                                  uid=meta.get("uid"))
        await self.recorder.record(pod, ADMISSION_REASON, message, "Warning", COMPONENT, node["metadata"]["name"],
                                   None)

    async def _run(self, runtime: PodRuntime) -> None:
        try:
            await runtime.run()
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("kubelet: pod %s/%s failed", runtime.namespace, runtime.name)

    async def remove_pod(self, namespace: str, name: str, reason: str = "deleted") -> None:
        """Stop a pod's containers (a `Killing` event for each running one)."""
        runtime = self.runtimes.pop((namespace, name), None)
        if runtime is None:
            return
        self.gpus.release(namespace, name)
        if reason == "deleted":
            for container in runtime.containers:
                if container.workload is not None:
                    await runtime.event("Killing", f"Stopping container {container.name}", container=container)
        await runtime.stop()

    async def stop_node(self, node_name: str) -> list[tuple[str, str]]:
        """Stop every runtime on a failed node; returns the pods that were running there."""
        keys = [key for key, runtime in self.runtimes.items() if runtime.node_name == node_name]
        for key in keys:
            await self.remove_pod(*key, reason="node failed")
        return keys

    async def crash(self, namespace: str, name: str, container: str | None = None) -> bool:
        runtime = self.runtimes.get((namespace, name))
        return runtime is not None and await runtime.crash(container)

    async def publish(self, runtime: PodRuntime) -> None:
        """Write the runtime's view into the pod's status (skipped once the pod is gone)."""
        if runtime.stopping:
            return
        if self.listeners is not None and runtime.phase == "Running":
            await self.listeners.expose(runtime)
        try:
            await self.api.set_status("v1/pods", runtime.namespace, runtime.name, runtime.status, uid=runtime.uid)
        except Exception as error:
            log.debug("kubelet: status of %s/%s not written: %r", runtime.namespace, runtime.name, error)

    def logs(self, namespace: str, name: str, container: str | None, previous: bool) -> list[str] | None:
        """What `kubectl logs` shows, or None when the pod or container is not running here."""
        runtime = self.runtimes.get((namespace, name))
        if runtime is None:
            return None
        for candidate in runtime.containers:
            if container in (None, "", candidate.name):
                if previous:
                    return candidate.previous_logs
                return candidate.current_logs()
        return None

    def workload(self, namespace: str, name: str, container: str):
        """The running workload of a pod's container, or None."""
        runtime = self.runtimes.get((namespace, name))
        for candidate in runtime.containers if runtime is not None else []:
            if candidate.name == container:
                return candidate.workload
        return None

    def port(self, namespace: str, name: str, port: str | int | None) -> int | None:
        runtime = self.runtimes.get((namespace, name))
        return runtime.port_for(port) if runtime is not None else None

    def is_ready(self, namespace: str, name: str) -> bool:
        runtime = self.runtimes.get((namespace, name))
        return runtime is not None and runtime.ready()

    async def shutdown(self) -> None:
        for key in list(self.runtimes):
            await self.remove_pod(*key, reason="shutdown")
        if self._session is not None:
            await self._session.close()
