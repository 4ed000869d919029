"""Simulated GPU nodes: the `--nodes` specification and the Node objects it becomes.

`GPUKEY:COUNTxGPUS` entries (keys from reference/gpus-and-models.md) become nodes labelled the way the
NVIDIA GPU feature discovery (or AMD's device plugin) labels real ones, tainted
`nvidia.com/gpu=present:NoSchedule`, with CPU and memory in proportion to their GPUs. `cpu:COUNT`
adds plain CPU nodes for routers and other pods without GPU tolerations; `cpu-real:COUNT` adds nodes whose
kubelet runs the real vLLM (CPU build) for vLLM pods (kubesim/engines/real.py), tainted so that only pods
tolerating `kubesim.io/cpu-real` land there, with memory for REAL_ENGINES_PER_NODE engines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from capacity.cpureal import CPU_REAL, CPU_REAL_TAINT, NODE_CLASS_LABEL, REAL_ENGINE_MEMORY_MIB, REAL_ENGINES_PER_NODE
from capacity.gpus import GPUS, Gpu, kubelet_reserved_memory_mib
from kubesim.apiserver.quantities import format_units

CPU_NODE_CPUS = 16
CPU_NODE_MEMORY_GIB = 64
MAX_PODS = 110
GPU_KEY_LABEL = "kubesim.io/gpu-key"
DEFAULT_NODES = "h100-sxm-80gb:1x8,l4-24gb:2x1,cpu:1"
_ENTRY = re.compile(r"^([a-z0-9-]+):(\d+)(?:x(\d+))?$")


@dataclass(frozen=True)
class NodeGroup:
    """`count` identical nodes with `gpus` GPUs of `gpu` each (gpu None: a CPU node; `real`: a cpu-real one)."""

    gpu: Gpu | None
    count: int
    gpus: int = 0
    real: bool = False


def parse_nodes(spec: str | None) -> list[NodeGroup]:
    """Parse `--nodes` ("h100-sxm-80gb:2x8,l4-24gb:4x1,cpu:1"); a spec without `cpu:` gets one CPU node."""
    groups: list[NodeGroup] = []
    for entry in (spec or DEFAULT_NODES).split(","):
        entry = entry.strip()
        if not entry:
            continue
        match = _ENTRY.match(entry)
        if not match:
            raise ValueError(f"bad node entry {entry!r}: expected GPUKEY:COUNTxGPUS, cpu:COUNT or cpu-real:COUNT")
        key, count, gpus = match.group(1), int(match.group(2)), match.group(3)
        if key in ("cpu", CPU_REAL):
            groups.append(NodeGroup(None, count, real=key == CPU_REAL))
            continue
        if key not in GPUS:
            raise ValueError(f"unknown GPU key {key!r}; known: {', '.join(sorted(GPUS))}")
        if gpus is None or int(gpus) < 1:
            raise ValueError(f"bad node entry {entry!r}: give the GPUs per node as COUNTxGPUS")
        groups.append(NodeGroup(GPUS[key], count, int(gpus)))
    if not any(group.gpu is None and not group.real for group in groups):
        # Real clusters keep a system node pool; routers and generic pods do not tolerate GPU taints.
        groups.append(NodeGroup(None, 1))
    return groups


def _node_name(group: NodeGroup, index: int) -> str:
    if group.real:
        return f"{CPU_REAL}-{index}"
    return f"cpu-{index}" if group.gpu is None else f"gpu-{group.gpu.key}-{index}"


def build_nodes(spec: str | None, pod_prefix: str = "10.244") -> list[dict]:
    """The Node objects (as JSON dicts, without server metadata) described by `--nodes`; node i's pods get
    addresses in `<pod_prefix>.<i>.0/24`."""
    nodes: list[dict] = []
    seen: dict[str | None, int] = {}
    for group in parse_nodes(spec):
        key = group.gpu.key if group.gpu else CPU_REAL if group.real else None
        for _ in range(group.count):
            index = seen.get(key, 0)
            seen[key] = index + 1
            node = node_object(_node_name(group, index), group.gpu, group.gpus, len(nodes), pod_prefix)
            nodes.append(real_node(node) if group.real else node)
    return nodes


def node_object(name: str, gpu: Gpu | None, gpus: int, ordinal: int, pod_prefix: str = "10.244") -> dict:
    """One Node: capacity, allocatable, GPU labels and taint, Ready condition and addresses."""
    if gpu is None:
        cpus, memory_gib = CPU_NODE_CPUS, CPU_NODE_MEMORY_GIB
    else:
        cpus, memory_gib = gpu.cpu_per_gpu * gpus, gpu.host_memory_gib_per_gpu * gpus
    capacity = {
        "cpu": str(cpus),
        "memory": f"{memory_gib}Gi",
        "ephemeral-storage": f"{200 * max(gpus, 1)}Gi",
        "pods": str(MAX_PODS),
    }
    # kube-reserved and system-reserved: what the kubelet keeps back on real nodes.
    allocatable = dict(capacity)
    allocatable["cpu"] = format_units("cpu", cpus * 1000 - 100 - 10 * cpus)
    allocatable["memory"] = format_units("memory", int(memory_gib * 1024 - kubelet_reserved_memory_mib(memory_gib))
                                         * 1024**2)
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": f"kubesim-{gpu.key}-x{gpus}" if gpu else "kubesim-cpu",
        "topology.kubernetes.io/zone": "kubesim-a",
    }
    taints = []
    if gpu is not None:
        capacity[gpu.resource] = allocatable[gpu.resource] = str(gpus)
        labels[GPU_KEY_LABEL] = gpu.key
        if gpu.vendor == "nvidia":
            labels.update({
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": gpu.product,
                "nvidia.com/gpu.count": str(gpus),
                "nvidia.com/gpu.memory": str(gpu.memory_mib),
            })
        else:
            labels.update({
                "amd.com/gpu.present": "true",
                "amd.com/gpu.product-name": gpu.product,
                "amd.com/gpu.count": str(gpus),
                "amd.com/gpu.vram": f"{gpu.memory_mib // 1024}G",
            })
        taints.append({"key": gpu.resource, "value": "present", "effect": "NoSchedule"})
    address = f"10.0.{ordinal // 250}.{ordinal % 250 + 10}"
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"podCIDR": f"{pod_prefix}.{ordinal}.0/24", "podCIDRs": [f"{pod_prefix}.{ordinal}.0/24"]},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": ready_conditions(True),
            "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "osImage": "kubesim",
                "kernelVersion": "6.8.0-kubesim",
                "containerRuntimeVersion": "containerd://1.7.27",
                "kubeletVersion": "v1.33.0",
                "kubeProxyVersion": "v1.33.0",
                "machineID": f"kubesim-{ordinal}",
                "systemUUID": f"kubesim-{ordinal}",
                "bootID": f"kubesim-{ordinal}",
            },
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        },
    }
    if taints:
        node["spec"]["taints"] = taints
    return node


def real_node(node: dict) -> dict:
    """A CPU node made a cpu-real one: its class label, its taint, and memory for REAL_ENGINES_PER_NODE engines."""
    memory = f"{REAL_ENGINE_MEMORY_MIB * REAL_ENGINES_PER_NODE}Mi"
    node["metadata"]["labels"][NODE_CLASS_LABEL] = CPU_REAL
    node["metadata"]["labels"]["node.kubernetes.io/instance-type"] = f"kubesim-{CPU_REAL}"
    node["spec"]["taints"] = [{"key": CPU_REAL_TAINT, "value": "present", "effect": "NoSchedule"}]
    node["status"]["capacity"].update(cpu="2", memory=memory)
    node["status"]["allocatable"].update(cpu="1900m", memory=memory)
    return node


def node_class(node: dict) -> str | None:
    """`cpu-real` for a node whose kubelet runs real engines, else None."""
    return ((node.get("metadata") or {}).get("labels") or {}).get(NODE_CLASS_LABEL)


def ready_conditions(ready: bool, now: str = "2026-01-01T00:00:00Z") -> list[dict]:
    """Node conditions for a healthy node (`ready`) or one whose kubelet stopped posting status."""
    unknown = ("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
    pressure = [
        ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ]
    conditions = []
    for kind, reason, message in pressure:
        if ready:
            conditions.append(_condition(kind, "False", reason, message, now))
        else:
            conditions.append(_condition(kind, *unknown, now))
    if ready:
        conditions.append(_condition("Ready", "True", "KubeletReady", "kubelet is posting ready status", now))
    else:
        conditions.append(_condition("Ready", *unknown, now))
    return conditions


def _condition(kind: str, status: str, reason: str, message: str, now: str) -> dict:
    return {
        "type": kind, "status": status, "reason": reason, "message": message,
        "lastHeartbeatTime": now, "lastTransitionTime": now,
    }


def node_gpu_key(node: dict) -> str | None:
    """The GPU key of a node (None for CPU nodes)."""
    return ((node.get("metadata") or {}).get("labels") or {}).get(GPU_KEY_LABEL)


def node_is_ready(node: dict) -> bool:
    """Whether the node's Ready condition is True."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False
