"""kubesim's engines say what real engines say when memory runs out, and size their KV cache as the planner does."""

from __future__ import annotations

from capacity.gpus import GPUS
from capacity.known import KNOWN_MODELS
from capacity.plan import Knobs, plan
from kubesim.engines import workload_for
from kubesim.engines.harness import pod_context
from tests.kubesim.engines.test_flags import start_error

VLLM = "vllm/vllm-openai:v0.33.0"
SGLANG = "lmsysorg/sglang:v0.5.23"
SGLANG_CMD = ["python3", "-m", "sglang.launch_server"]
LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"


def test_vllm_70b_on_one_l4_dies_loading_weights_with_cuda_out_of_memory():
    err = start_error(pod_context(VLLM, ["--model", LLAMA_70B], gpu_key="l4-24gb"))
    # 141.2e9 B of weights over 80 layers: 1.765e9 B = 1.64 GiB per layer; the 24 GiB GPU is full before the end.
    assert err.message.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.64 GiB. "
                                  "GPU 0 has a total capacity of 24.00 GiB")
    assert err.logs[-1] == err.message and "EngineCore failed to start." in err.logs[-3]


def test_sglang_70b_on_one_l4_reports_the_dead_scheduler_and_the_oom():
    err = start_error(pod_context(SGLANG, ["--model-path", LLAMA_70B], command=SGLANG_CMD, gpu_key="l4-24gb"))
    assert "torch.OutOfMemoryError: CUDA out of memory." in err.message
    assert any("Rank 0 scheduler is dead" in line for line in err.logs)


def test_vllm_refuses_a_context_above_the_kv_capacity_in_vllms_words():
    # Llama 8B on an L4 at vLLM's default 0.92: 25,769,803,776 x 0.92 = 23,708,219,473.92;
    # budget 23,708,219,473.92 - 16,060,000,000 - 268,435,456 - 536,870,912 = 6,842,913,105 B
    # → 3262 blocks of 2,097,152 B (3262 x 2,097,152 = 6,840,909,824) = 52,192 tokens = 6.37 GiB of KV;
    # 131,072 tokens x 131,072 B = 16.00 GiB needed.
    err = start_error(pod_context(VLLM, ["--model", "meta-llama/Llama-3.1-8B-Instruct"], gpu_key="l4-24gb"))
    assert err.message == (
        "ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (6.37 GiB). Based on the available memory, the "
        "estimated maximum model length is 52192. Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine."
    )


def _cases():
    for model in KNOWN_MODELS.values():
        for gpu in GPUS.values():
            for tp in range(1, gpu.max_gpus_per_node + 1):
                if model.tp_error(tp) is None:
                    yield model, gpu, tp


def test_kubesim_num_gpu_blocks_agree_with_the_planner_for_every_model_gpu_and_tp_that_fits():
    checked = 0
    for model, gpu, tp in _cases():
        # A short context so every configuration whose weights load also starts; vLLM's default utilisation.
        knobs = Knobs(gpu_memory_utilization=0.92, max_model_len=2048)
        planned = plan(model, gpu, tp, knobs, search=False)
        if not planned.fits:
            continue
        args = ["--model", model.name, "--max-model-len", "2048", "--tensor-parallel-size", str(tp)]
        engine = workload_for(pod_context(VLLM, args, gpu_key=gpu.key, gpu_count=tp))
        reported = int(engine.spec.cache_info["num_gpu_blocks"])
        assert abs(reported - planned.num_blocks) <= 0.02 * planned.num_blocks, (model.name, gpu.key, tp)
        checked += 1
    # 8 models x 10 GPUs x their valid TPs, minus what does not fit: a broad sweep, not a handful.
    assert checked > 200
