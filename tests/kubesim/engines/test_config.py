"""How an engine's parsed flags become the simulated instance (kubesim/engines/config.py): the refusals the
real engines print for arguments they cannot run with, and flags whose value the instance takes as given."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kubesim.engines import config, flags
from kubesim.engines.harness import pod_context
from kubesim.workload import WorkloadExit

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
VLLM = "vllm/vllm-openai:v0.33.0"
SGLANG = "lmsysorg/sglang:v0.5.2-cu126"


def vllm(*args: str, gpu_count: int = 1):
    ctx = pod_context(VLLM, [LLAMA, "--max-model-len", "8192", *args], gpu_count=gpu_count)
    ns, _ = flags.parse_vllm(flags.command_line(ctx.container, ctx.env))
    return config.vllm_spec(ns, ctx)


def sglang(*args: str, gpu_count: int = 1):
    ctx = pod_context(SGLANG, ["python3", "-m", "sglang.launch_server", "--model-path", LLAMA,
                               "--context-length", "8192", *args], gpu_count=gpu_count)
    ns, _ = flags.parse_sglang(flags.command_line(ctx.container, ctx.env))
    return config.sglang_spec(ns, ctx)


@pytest.mark.parametrize(("args", "message"), [
    (["--tensor-parallel-size", "0"], "ValueError: tensor_parallel_size and pipeline_parallel_size must be >= 1"),
    (["--pipeline-parallel-size", "0"], "ValueError: tensor_parallel_size and pipeline_parallel_size must be >= 1"),
    (["--tensor-parallel-size", "3"],  # Llama-3.1-8B has 32 attention heads
     "ValueError: Total number of attention heads (32) must be divisible by tensor parallel size (3)."),
    (["--gpu-memory-utilization", "1.5"], "ValueError: GPU memory utilization must be within (0, 1]. Got 1.5."),
    (["--block-size", "24"], "argument --block-size: invalid choice: 24"),
    (["--max-model-len", "200000"],  # the model's max_position_embeddings is 131072
     "ValueError: User-specified max_model_len (200000) is greater than the derived max_model_len "
     "(max_position_embeddings=131072 in model's config.json)"),
    (["--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_role": "kv_leader"}'],
     "ValueError: Unsupported kv_role: kv_leader. Supported roles are ['kv_producer', 'kv_consumer', 'kv_both']"),
])
def test_vllm_refuses_arguments_it_cannot_run_with(args, message):
    with pytest.raises(WorkloadExit) as error:
        vllm(*args, gpu_count=4)
    assert str(error.value).startswith(message)


@pytest.mark.parametrize(("args", "message"), [
    (["--tp-size", "3"], "AssertionError: Number of attention heads (32) must be divisible by tp (3)"),
    (["--mem-fraction-static", "0.01"],
     "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
     "Current value: mem_fraction_static=0.01"),
])
def test_sglang_refuses_arguments_it_cannot_run_with(args, message):
    with pytest.raises(WorkloadExit) as error:
        sglang(*args, gpu_count=4)
    assert str(error.value) == message


def test_vllm_takes_queue_limits_lora_slots_and_histogram_buckets_as_given():
    spec = vllm("--max-num-queued-reqs", "7", "--max-num-queued-tokens", "9000", "--max-loras", "3",
                "--custom-histogram-buckets", '{"ttft": [0.5, 1.0]}', "--kv-cache-dtype", "fp8")
    assert (spec.max_queued_requests, spec.max_queued_tokens, spec.max_loras) == (7, 9000, 3)
    assert spec.custom_buckets == {"ttft": [0.5, 1.0]}
    assert spec.kv_cache_dtype == "fp8"
    assert spec.cache_info["cache_dtype"] == "fp8"


def test_sglang_takes_queue_limit_lora_slots_token_cap_and_buckets_as_given():
    spec = sglang("--max-queued-requests", "5", "--max-loras-per-batch", "2", "--max-total-tokens", "1000",
                  "--bucket-time-to-first-token", "0.1", "0.2", "--bucket-e2e-request-latency", "1", "--enable-metrics")
    assert (spec.max_queued_requests, spec.max_loras, spec.max_total_tokens) == (5, 2, 1000)
    assert spec.sglang_buckets == {"ttft": [0.1, 0.2], "e2e": [1.0]}
    assert spec.enable_metrics is True
    assert sglang().enable_metrics is False


@pytest.mark.parametrize(("cache", "seconds"), [
    # Llama-3.1-8B in BF16 is 16.06 GB. On an H100 (PCIe 5.0, 80 % of 63 GB/s = 50.4 GB/s) it loads in 0.31865 s
    # and vLLM inits in 20 s. From the node's disk at 5 GB/s: 3.212 s. From the cluster cache at 2 GB/s: 8.03 s.
    # Nothing cached: first downloaded at 200 MB/s (80.3 s), then read from the cluster cache.
    ("node", 3.212 + 0.31865 + 20),
    ("cluster", 8.03 + 0.31865 + 20),
    ("none", 80.3 + 8.03 + 0.31865 + 20),
])
def test_the_start_up_depends_on_where_the_pod_finds_its_weights(cache, seconds):
    ctx = replace(pod_context(VLLM, [LLAMA, "--max-model-len", "8192"], fast_start=False), weights_cache=cache)
    spec = config.vllm_spec(flags.parse_vllm(flags.command_line(ctx.container, ctx.env))[0], ctx)
    assert spec.startup_s == pytest.approx(seconds, abs=1e-4)
    assert spec.phases.cache == cache


def test_a_tensor_parallel_pod_reads_all_its_ranks_weights_and_loads_each_share_on_its_own_link():
    # Llama-3.1-70B in BF16, 141.2 GB, on 4 H100s: read from the node's disk at 5 GB/s = 28.24 s; each rank loads
    # 35.3 GB over its link at 50.4 GB/s = 0.70040 s; SGLang inits in 15 s.
    ctx = replace(pod_context(SGLANG, ["python3", "-m", "sglang.launch_server", "--model-path",
                                       "meta-llama/Llama-3.1-70B-Instruct", "--context-length", "8192", "--tp", "4"],
                              gpu_count=4, fast_start=False), weights_cache="node")
    spec = config.sglang_spec(flags.parse_sglang(flags.command_line(ctx.container, ctx.env))[0], ctx)
    assert spec.phases.read_s == pytest.approx(28.24)
    assert spec.phases.load_s == pytest.approx(0.700397, abs=1e-5)
    assert spec.startup_s == pytest.approx(28.24 + 0.700397 + 15, abs=1e-4)
