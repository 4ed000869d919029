"""Usage rows laid out so that a service's reuse curve can be worked by hand (see tests/gateway/test_kv_reuse.py):
P prompts of K 64-character chunks (16 tokens at 4 characters a token) sent in turn, N requests in all."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from apps.gateway.models import UsageRow
from apps.serving.capacity import pool_plan
from tests.factories import InferenceServiceFactory

P, N = 4, 100  # the first round, P misses, stays under 5 % of the requests: p95 sees the hits
CHARS_PER_TOKEN = 4
GIB = 2**30


def make_service(tenant, tier_gib=None, name="rag"):
    settings = {"max_model_len": 8192}
    if tier_gib:
        settings["kv_offload"] = {"backend": "native", "size_gib": tier_gib}
    return InferenceServiceFactory(tenant=tenant, name=name, engine_settings=settings,
                                   pools=[{"role": "engine", "gpu_type": "l4-24gb"}])


def gpu_cache(service):
    plan, _, _ = pool_plan(service.model, "vllm", service.engine_settings_obj(), service.spec_pools()[0])
    return plan


def send_rounds(service, chunks_per_prompt: int, ttft_ms: float = 20_000.0):
    start = timezone.now() - timedelta(minutes=30)
    for n in range(N):
        p = n % P
        chars = chunks_per_prompt * 64
        UsageRow.objects.create(
            at=start + timedelta(seconds=n), tenant=service.tenant, service_id=service.pk, model="rag", status=200,
            prompt_tokens=chars // CHARS_PER_TOKEN, completion_tokens=8, ttft_ms=ttft_ms, duration_ms=ttft_ms + 500,
            prompt_chars=chars, prefix_blocks=[p * 100_000 + k for k in range(chunks_per_prompt)])


def layout(service, caches: float = 1.5) -> int:
    """K, chunks a prompt, so that P prompts fill `caches` GPU caches."""
    gpu_chunks = gpu_cache(service).max_tokens / 16
    return int(caches * gpu_chunks / P)
