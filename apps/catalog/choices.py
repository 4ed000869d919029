"""Vocabularies of the catalog: engines, deployment modes, model dtypes."""

from django.db import models


class EngineKind(models.TextChoices):
    VLLM = "vllm", "vLLM"
    SGLANG = "sglang", "SGLang"


class DeploymentMode(models.TextChoices):
    STANDARD = "standard", "Standard (one engine pool)"
    PD_DISAGGREGATED = "pd_disaggregated", "Prefill/decode disaggregated"
    MULTI_NODE = "multi_node", "Multi-node (LeaderWorkerSet)"
    SERVERLESS = "serverless", "Serverless (scale to zero)"


class KvLayout(models.TextChoices):
    """How a model's KV cache is laid out: what an engine's KV offloading can or cannot move."""

    UNIFORM = "uniform", "Uniform (every layer full attention, K and V per KV head)"
    MLA = "mla", "Multi-head latent attention (one latent vector per token, DeepSeek-V3 family)"
    HYBRID = "hybrid", "Hybrid (sliding-window and full attention layers, or Mamba and attention layers)"


class ModelDtype(models.TextChoices):
    BFLOAT16 = "bfloat16", "bfloat16"
    FLOAT16 = "float16", "float16"
    FLOAT32 = "float32", "float32"
    FP8 = "fp8", "fp8"


# Bytes a parameter takes in each dtype (the checkpoint's size, and what a GPU holds of it).
DTYPE_BYTES = {ModelDtype.BFLOAT16: 2, ModelDtype.FLOAT16: 2, ModelDtype.FLOAT32: 4, ModelDtype.FP8: 1}
