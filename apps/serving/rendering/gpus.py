"""GPU types (keys of reference/gpus-and-models.md) as Kubernetes sees them.

The product string is what NVIDIA GPU feature discovery puts on the node label `nvidia.com/gpu.product`
(AMD's labeller: `amd.com/gpu.product-name`); the resource is the extended resource pods request.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuKind:
    key: str
    product: str
    memory_gb: int
    vendor: str = "nvidia"

    @property
    def resource(self) -> str:
        return f"{self.vendor}.com/gpu"

    @property
    def product_label(self) -> str:
        return "nvidia.com/gpu.product" if self.vendor == "nvidia" else "amd.com/gpu.product-name"


GPU_KINDS: dict[str, GpuKind] = {
    g.key: g
    for g in (
        GpuKind("h100-sxm-80gb", "NVIDIA-H100-80GB-HBM3", 80),
        GpuKind("h100-pcie-80gb", "NVIDIA-H100-PCIe", 80),
        GpuKind("h200-141gb", "NVIDIA-H200", 141),
        GpuKind("a100-sxm-80gb", "NVIDIA-A100-SXM4-80GB", 80),
        GpuKind("a100-40gb", "NVIDIA-A100-SXM4-40GB", 40),
        GpuKind("l40s-48gb", "NVIDIA-L40S", 48),
        GpuKind("l4-24gb", "NVIDIA-L4", 24),
        GpuKind("rtx4090-24gb", "NVIDIA-GeForce-RTX-4090", 24),
        GpuKind("b200-180gb", "NVIDIA-B200", 180),
        GpuKind("mi300x-192gb", "AMD-Instinct-MI300X", 192, vendor="amd"),
    )
}


def gpu_kind(key: str) -> GpuKind:
    try:
        return GPU_KINDS[key]
    except KeyError:
        raise ValueError(f"unknown GPU type {key!r}") from None
