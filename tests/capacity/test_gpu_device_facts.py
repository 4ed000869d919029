"""The one GPU table also holds what the devices report (DCGM, nvidia-smi), read by kubesim."""

from __future__ import annotations

from capacity.gpus import GPUS


def test_device_names_are_what_nvidia_smi_prints():
    assert GPUS["a100-sxm-80gb"].device_name == "NVIDIA A100-SXM4-80GB"
    assert GPUS["h100-sxm-80gb"].device_name == "NVIDIA H100 80GB HBM3"
    assert GPUS["l4-24gb"].device_name == "NVIDIA L4"


def test_every_gpu_has_a_power_limit_and_nvidia_ones_their_clocks():
    assert (GPUS["h100-sxm-80gb"].tdp_watts, GPUS["l4-24gb"].tdp_watts, GPUS["mi300x-192gb"].tdp_watts) == (
        700, 72, 750)
    assert [g.key for g in GPUS.values() if g.vendor == "nvidia" and not g.sm_clock_max_mhz] == []
