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


class ModelDtype(models.TextChoices):
    BFLOAT16 = "bfloat16", "bfloat16"
    FLOAT16 = "float16", "float16"
    FLOAT32 = "float32", "float32"
    FP8 = "fp8", "fp8"
