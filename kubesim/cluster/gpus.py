"""The GPUs of each node as devices: which container holds which GPU, and what each one reads right now.

The kubelet's device plugin hands a container requesting `nvidia.com/gpu: N` the lowest N free devices of its
node and takes them back when the pod stops. A device's memory use and utilization come from the workload of
the container holding it (`gpu_usage()` of a simulated engine: the memory fraction it reserves and how busy its
batch is); a device nobody holds reads 0 MiB used (DCGM's `DCGM_FI_DEV_FB_USED`) and 0 % (`DCGM_FI_DEV_GPU_UTIL`).
`nvidia-smi` in `kubectl exec` and the simulated dcgm-exporter read the same devices.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from capacity.gpus import GPUS
from kubesim.apiserver.quantities import pod_resources
from kubesim.cluster.nodes import node_gpu_key

# Reserved by the driver and CUDA on every device before any process allocates (nvidia-smi's baseline).
DRIVER_RESERVED_MIB = 512
IDLE_POWER_FRACTION = 0.12


@dataclass
class Device:
    """One GPU of a node; `holder` is (namespace, pod, container) while a container holds it."""

    node: str
    index: int
    gpu_key: str
    holder: tuple[str, str, str] | None = None

    @property
    def gpu(self):
        return GPUS[self.gpu_key]

    @property
    def name(self) -> str:
        """The device name as nvidia-smi prints it, e.g. "NVIDIA H100 80GB HBM3"."""
        return self.gpu.device_name

    @property
    def uuid(self) -> str:
        return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{self.node}.gpu{self.index}.kubesim"))

    @property
    def bus_id(self) -> str:
        return f"00000000:{0x18 + 0x10 * self.index:02X}:00.0"

    @property
    def tdp_watts(self) -> int:
        return self.gpu.tdp_watts


@dataclass
class Reading:
    """What a device reads at one moment."""

    used_mib: int
    total_mib: int
    utilization: float  # 0..1

    @property
    def free_mib(self) -> int:
        return self.total_mib - self.used_mib


class GpuDevices:
    """Device assignment for every node, filled as the kubelet starts and stops pods."""

    def __init__(self):
        self._nodes: dict[str, list[Device]] = {}

    def node_devices(self, node: dict) -> list[Device]:
        name = node["metadata"]["name"]
        if name not in self._nodes:
            key = node_gpu_key(node)
            count = int(((node.get("status") or {}).get("capacity") or {}).get(GPUS[key].resource, 0)) \
                if key in GPUS else 0
            self._nodes[name] = [Device(name, i, key) for i in range(count)]
        return self._nodes[name]

    def allocate(self, pod: dict, node: dict) -> None:
        """Give each container of `pod` the GPUs its limits ask for (lowest free indices first)."""
        meta = pod["metadata"]
        devices = self.node_devices(node)
        for container in (pod.get("spec") or {}).get("containers") or []:
            wanted = sum(n for r, n in pod_resources({"spec": {"containers": [container]}}, "limits").items()
                         if r.endswith("/gpu"))
            holder = (meta.get("namespace") or "default", meta["name"], container.get("name", ""))
            held = [d for d in devices if d.holder == holder]
            for device in devices:
                if len(held) >= wanted:
                    break
                if device.holder is None:
                    device.holder = holder
                    held.append(device)

    def release(self, namespace: str, name: str) -> None:
        for devices in self._nodes.values():
            for device in devices:
                if device.holder is not None and device.holder[:2] == (namespace, name):
                    device.holder = None

    def of_pod(self, namespace: str, name: str, container: str | None = None) -> list[Device]:
        return [d for devices in self._nodes.values() for d in devices
                if d.holder is not None and d.holder[:2] == (namespace, name)
                and (container is None or d.holder[2] == container)]

    def on_node(self, node_name: str) -> list[Device]:
        return list(self._nodes.get(node_name, []))

    @staticmethod
    def read(device: Device, workload) -> Reading:
        """The device's memory and utilization, from the holding container's workload (None: idle)."""
        total = device.gpu.memory_mib
        used, busy = DRIVER_RESERVED_MIB if device.holder else 0, 0.0
        usage = getattr(workload, "gpu_usage", None)
        if callable(usage):
            fraction, busy = usage()
            used = max(used, min(total, int(total * fraction)))
        return Reading(used, total, busy)
