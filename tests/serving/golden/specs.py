"""The eight ServiceSpecs of the golden tests: every deployment mode × both engines.

Each spec also exercises other features (adapters, gated models, routers, autoscalers, gateway, PVC
sources) so the goldens cover them without a spec per feature. Model facts: gpus-and-models.md.
"""

from apps.catalog.engines import EngineSettings
from apps.serving.rendering import AdapterSpec, AutoscalingSpec, ModelSpec, PoolSpec, ServiceSpec

UID = "5f2c1e4a-8d3b-4c6e-9a71-0b2d4e6f8a10"

LLAMA_8B = ModelSpec("llama-3-1-8b", "hf://meta-llama/Llama-3.1-8B-Instruct@0e9e39f2", 8_030_000_000,
                     32, 4096, 32, 8, 128, 131072)
LLAMA_70B = ModelSpec("llama-3-1-70b", "pvc://shared-models/llama-3.1-70b-instruct", 70_600_000_000,
                      80, 8192, 64, 8, 128, 131072)
QWEN_7B = ModelSpec("qwen2-5-7b", "s3://models-bucket/qwen2.5-7b-instruct", 7_620_000_000,
                    28, 3584, 28, 4, 128, 32768)
QWEN3_8B = ModelSpec("qwen3-8b", "hf://Qwen/Qwen3-8B", 8_190_000_000, 36, 4096, 32, 8, 128, 32768)
MISTRAL_7B = ModelSpec("mistral-7b", "hf://mistralai/Mistral-7B-Instruct-v0.3", 7_250_000_000,
                       32, 4096, 32, 8, 128, 32768)


def _spec(**overrides) -> ServiceSpec:
    # node_model_volume "csi": the choice of the kubesim clusters (seed_demo, tests' ClusterFactory); the renders of
    # "none" and "hostPath" are checked in tests/serving/test_node_model_volume.py.
    base = dict(tenant="acme", tenant_gpu_quota=32, name="chat", uid=UID, namespace="tenant-acme",
                generation=4, node_model_volume="csi")
    base.update(overrides)
    return ServiceSpec(**base)


def vllm_image(**kw):
    return dict(engine="vllm", image="vllm/vllm-openai", tag="v0.33.0", **kw)


def sglang_image(**kw):
    return dict(engine="sglang", image="lmsysorg/sglang", tag="v0.5.23", **kw)


SPECS = {
    "standard-vllm": lambda: _spec(
        mode="standard", **vllm_image(runtime_args=("--disable-fastapi-docs",)),
        model=LLAMA_8B, model_token_secret="hf-token",
        adapters=(AdapterSpec("sql-expert", "hf://acme/llama-sql-lora", 16),),
        pools=(PoolSpec("engine", 2, 1, 4, 1, "l4-24gb"),),
        settings=EngineSettings(max_model_len=8192, kv_cache_dtype="fp8", enable_prefix_caching=True,
                                gpu_memory_utilization=0.9),
        has_gateway=True,
    ),
    "standard-sglang": lambda: _spec(
        mode="standard", **sglang_image(), model=QWEN_7B,
        pools=(PoolSpec("engine", 3, 3, 3, 1, "l40s-48gb"),),
        settings=EngineSettings(kv_cache_dtype="fp8_e4m3", max_num_seqs=64),
        routing="prefix_aware",
    ),
    "pd_disaggregated-vllm": lambda: _spec(
        mode="pd_disaggregated", **vllm_image(), model=LLAMA_8B,
        pools=(PoolSpec("prefill", 1, 1, 2, 2, "h100-sxm-80gb"), PoolSpec("decode", 2, 1, 4, 2, "h100-sxm-80gb")),
        settings=EngineSettings(tensor_parallel_size=2),
        autoscaling=AutoscalingSpec.from_dict({
            "autoscaler": "hpa", "targets": {"waiting_requests_per_replica": 8, "kv_cache_usage": 0.8},
            "scale_down_stabilization_seconds": 300}),
    ),
    "pd_disaggregated-sglang": lambda: _spec(
        mode="pd_disaggregated", **sglang_image(), model=QWEN3_8B,
        pools=(PoolSpec("prefill", 1, 1, 1, 1, "h200-141gb"), PoolSpec("decode", 1, 1, 1, 1, "h200-141gb")),
        routing="cache_aware",
    ),
    "multi_node-vllm": lambda: _spec(
        mode="multi_node", **vllm_image(), model=LLAMA_70B,
        pools=(PoolSpec("leader", 1, 1, 1, 8, "a100-sxm-80gb", 2),),
        settings=EngineSettings(tensor_parallel_size=8, pipeline_parallel_size=2, max_model_len=32768),
    ),
    "multi_node-sglang": lambda: _spec(
        mode="multi_node", **sglang_image(), model=QWEN3_8B,
        pools=(PoolSpec("leader", 2, 1, 2, 4, "h100-sxm-80gb", 2),),
        settings=EngineSettings(tensor_parallel_size=8),
        routing="kv_aware", has_gateway=True,
    ),
    "serverless-vllm": lambda: _spec(
        mode="serverless", **vllm_image(), model=MISTRAL_7B,
        pools=(PoolSpec("engine", 0, 0, 3, 1, "l4-24gb"),),
        autoscaling=AutoscalingSpec.from_dict({
            "autoscaler": "keda", "targets": {"waiting_requests_per_replica": 4, "ttft_p95_seconds": 1.5},
            "scale_to_zero_after_seconds": 600}),
    ),
    "serverless-sglang": lambda: _spec(
        mode="serverless", **sglang_image(), model=MISTRAL_7B,
        pools=(PoolSpec("engine", 1, 0, 2, 1, "rtx4090-24gb"),),
        autoscaling=AutoscalingSpec.from_dict({"autoscaler": "builtin", "targets": {"kv_cache_usage": 0.85}}),
    ),
}
