"""GPU facts of reference/gpus-and-models.md (nominal specs, dense BF16) for capacity planning.

Keys match `apps.serving.choices.GpuType` and kubesim's node kinds.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuSpec:
    key: str
    name: str
    memory_gb: float
    bandwidth_tb_s: float
    bf16_tflops: float
    resource_name: str = "nvidia.com/gpu"


GPU_SPECS: dict[str, GpuSpec] = {
    spec.key: spec
    for spec in (
        GpuSpec("h100-sxm-80gb", "NVIDIA H100 SXM", 80, 3.35, 989),
        GpuSpec("h100-pcie-80gb", "NVIDIA H100 PCIe", 80, 2.0, 756),
        GpuSpec("h200-141gb", "NVIDIA H200 SXM", 141, 4.8, 989),
        GpuSpec("a100-sxm-80gb", "NVIDIA A100 SXM", 80, 2.04, 312),
        GpuSpec("a100-40gb", "NVIDIA A100", 40, 1.56, 312),
        GpuSpec("l40s-48gb", "NVIDIA L40S", 48, 0.864, 362),
        GpuSpec("l4-24gb", "NVIDIA L4", 24, 0.30, 121),
        GpuSpec("rtx4090-24gb", "NVIDIA RTX 4090", 24, 1.01, 165),
        GpuSpec("b200-180gb", "NVIDIA B200", 180, 8.0, 2250),
        GpuSpec("mi300x-192gb", "AMD Instinct MI300X", 192, 5.3, 1307, resource_name="amd.com/gpu"),
    )
}
