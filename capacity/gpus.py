"""The one GPU table: every fact about a GPU kind that the simulator, the renderer and the planner use.

Keys are the ones kubesim's `--nodes` takes (reference/gpus-and-models.md). The product string is what
NVIDIA GPU feature discovery puts on the node label `nvidia.com/gpu.product` (AMD's labeller:
`amd.com/gpu.product-name`); `memory_mib` is what the device reports (`nvidia.com/gpu.memory`).
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3
# The largest single node the planner considers (8-GPU servers: HGX, and the 8-GPU L4/L40S instances).
MAX_GPUS_PER_NODE = 8
# The host link of a GPU, nominal bytes/s per direction of a PCIe x16 link: 16 GT/s (4.0) or 32 GT/s (5.0) per
# lane, 128b/130b encoding. Measured copies of pinned memory reach about 80 % of it.
PCIE4_X16 = 31.5e9
PCIE5_X16 = 63.0e9
# Pinned-memory copies over PCIe reach about 80 % of the link's nominal rate: the simulated engines' figure (unless a
# pod's `kubesim.io/host-link-fraction` says otherwise) and the CPU-tier estimate's (apps/gateway/kv_reuse.py).
HOST_LINK_FRACTION = 0.8


@dataclass(frozen=True)
class Gpu:
    """One GPU kind: labels, memory, nominal dense BF16 FLOP/s, memory bandwidth and host shape."""

    key: str
    label: str  # product name for people, e.g. "NVIDIA L4 24GB"
    short: str  # what advice sentences say, e.g. "L4", "H100 80GB"
    product: str  # value of the vendor's product node label
    memory_gb: int  # nominal memory; the engines' arithmetic counts it in GiB (as the simulator does)
    memory_mib: int  # reported by the device, published on the node label
    bandwidth: float  # bytes/s
    flops: float  # dense BF16 FLOP/s
    interconnect: float = 64e9  # bytes/s between GPUs of a node (NVLink where the card has it, else PCIe 5)
    host_link: float = PCIE4_X16  # bytes/s between the GPU and host memory (the KV cache's CPU tier)
    vendor: str = "nvidia"
    cpu_per_gpu: int = 24  # vCPUs per GPU on the cloud instance families that carry this GPU
    host_memory_gib_per_gpu: int = 240
    max_gpus_per_node: int = MAX_GPUS_PER_NODE
    # What the device itself reports (nvidia-smi, DCGM): board power limit, top SM and memory clocks (None
    # where the reference gives no figure), and the device name where it is not `product` with spaces.
    tdp_watts: int = 300
    sm_clock_max_mhz: int | None = None
    mem_clock_mhz: int | None = None
    device_name_override: str | None = None

    @property
    def resource(self) -> str:
        """The extended resource pods request (`nvidia.com/gpu`, `amd.com/gpu`)."""
        return f"{self.vendor}.com/gpu"

    @property
    def product_label(self) -> str:
        """The node label that carries `product`."""
        return "nvidia.com/gpu.product" if self.vendor == "nvidia" else "amd.com/gpu.product-name"

    @property
    def device_name(self) -> str:
        """The name nvidia-smi and DCGM's `modelName` report."""
        return self.device_name_override or self.product.replace("-", " ")

    @property
    def memory_bytes(self) -> int:
        return self.memory_gb * GIB


GPUS: dict[str, Gpu] = {
    g.key: g
    for g in (
        Gpu("h100-sxm-80gb", "NVIDIA H100 SXM 80GB", "H100 80GB", "NVIDIA-H100-80GB-HBM3", 80, 81559,
            3.35e12, 989e12, 900e9,
            tdp_watts=700, sm_clock_max_mhz=1980, mem_clock_mhz=2619, host_link=PCIE5_X16),
        Gpu("h100-pcie-80gb", "NVIDIA H100 PCIe 80GB", "H100 PCIe", "NVIDIA-H100-PCIe", 80, 81559,
            2.0e12, 756e12, cpu_per_gpu=16, host_memory_gib_per_gpu=180,
            tdp_watts=350, sm_clock_max_mhz=1755, mem_clock_mhz=1593, host_link=PCIE5_X16),
        Gpu("h200-141gb", "NVIDIA H200 141GB", "H200", "NVIDIA-H200", 141, 143771, 4.8e12, 989e12, 900e9,
            tdp_watts=700, sm_clock_max_mhz=1980, mem_clock_mhz=3201, host_link=PCIE5_X16),
        Gpu("a100-sxm-80gb", "NVIDIA A100 SXM 80GB", "A100 80GB", "NVIDIA-A100-SXM4-80GB", 80, 81920,
            2.04e12, 312e12, 600e9, cpu_per_gpu=12, host_memory_gib_per_gpu=140,
            tdp_watts=400, sm_clock_max_mhz=1410, mem_clock_mhz=1593, device_name_override="NVIDIA A100-SXM4-80GB"),
        Gpu("a100-40gb", "NVIDIA A100 40GB", "A100 40GB", "NVIDIA-A100-SXM4-40GB", 40, 40960,
            1.56e12, 312e12, cpu_per_gpu=12, host_memory_gib_per_gpu=140,
            tdp_watts=400, sm_clock_max_mhz=1410, mem_clock_mhz=1215, device_name_override="NVIDIA A100-SXM4-40GB"),
        Gpu("l40s-48gb", "NVIDIA L40S 48GB", "L40S", "NVIDIA-L40S", 48, 46068, 0.864e12, 362e12,
            cpu_per_gpu=16, host_memory_gib_per_gpu=64,
            tdp_watts=350, sm_clock_max_mhz=2520, mem_clock_mhz=9001),
        Gpu("l4-24gb", "NVIDIA L4 24GB", "L4", "NVIDIA-L4", 24, 23034, 0.30e12, 121e12,
            cpu_per_gpu=8, host_memory_gib_per_gpu=32,
            tdp_watts=72, sm_clock_max_mhz=2040, mem_clock_mhz=6251),
        Gpu("rtx4090-24gb", "NVIDIA RTX 4090 24GB", "RTX 4090", "NVIDIA-GeForce-RTX-4090", 24, 24564,
            1.01e12, 165e12, cpu_per_gpu=8, host_memory_gib_per_gpu=32,
            tdp_watts=450, sm_clock_max_mhz=2520, mem_clock_mhz=10501),
        Gpu("b200-180gb", "NVIDIA B200 180GB", "B200", "NVIDIA-B200", 180, 183359, 8.0e12, 2250e12, 1800e9,
            cpu_per_gpu=28, host_memory_gib_per_gpu=256,
            tdp_watts=1000, sm_clock_max_mhz=1965, mem_clock_mhz=3996, host_link=PCIE5_X16),
        Gpu("mi300x-192gb", "AMD Instinct MI300X 192GB", "MI300X", "AMD-Instinct-MI300X", 192, 196592,
            5.3e12, 1307e12, 896e9, vendor="amd", cpu_per_gpu=16, host_memory_gib_per_gpu=256,
            tdp_watts=750, host_link=PCIE5_X16),
    )
}


def kubelet_reserved_memory_mib(memory_gib: float) -> float:
    """What the kubelet keeps back of a node's memory (kube-reserved and system-reserved): 1 GiB plus 10 MiB per
    GiB, the latter at most 4 GiB. kubesim's nodes subtract it in `status.allocatable`; admission plans with it."""
    return 1024 + min(memory_gib * 10, 4096)


def node_allocatable_memory_gib(gpu: Gpu, gpus: int) -> float:
    """Host memory a node with `gpus` of this GPU can give pods: its memory less the kubelet's reservation."""
    memory_gib = gpu.host_memory_gib_per_gpu * gpus
    return memory_gib - kubelet_reserved_memory_mib(memory_gib) / 1024


def gpu_for(key: str) -> Gpu:
    """The GPU of a key; ValueError naming the known keys otherwise."""
    try:
        return GPUS[key]
    except KeyError:
        raise ValueError(f"unknown GPU type {key!r}; known: {', '.join(GPUS)}") from None


def choices() -> list[tuple[str, str]]:
    """(key, label) pairs in table order, for choice fields."""
    return [(g.key, g.label) for g in GPUS.values()]
