"""Advice on engine settings the lab measures through kubesim's engine core: the batched-token budget (larger when
prefill dominates with ITL headroom, smaller when ITL misses) and a CPU tier of the KV cache (prefixes reused and
the GPU pool full). Each is kept only when the replay of the recorded load confirms it by at least 5 %.

Hand arithmetic for Llama 3.1 8B on one L4 (reference/gpus-and-models.md, the engine model's defaults): weights
8.03e9 x 2 B = 16.06 GB, read at 0.30 TB/s x 0.7 = 210 GB/s: 76.5 ms a step at least; prefill 2 x 8.03e9 FLOPs a
token at 121 TFLOP/s x 0.5 = 60.5 TFLOP/s: 0.265 ms a token; 2 ms of overhead a step; KV 128 KiB a token.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.gateway.models import UsageRow
from apps.telemetry.models import SERVICE_ROLE, SeriesPoint
from apps.whatif.advice import observations, proposals, refresh_advice
from apps.whatif.lab import shared_prefixes
from tests.factories import InferenceServiceFactory

pytestmark = pytest.mark.django_db


def _service(tenant, name, settings):
    return InferenceServiceFactory(
        tenant=tenant, name=name, engine_settings={"max_model_len": 8192, **settings},
        pools=[{"role": "engine", "replicas": 1, "min_replicas": 1, "max_replicas": 1, "gpu_type": "l4-24gb"}])


def _load(service, *, every_s, count, prompt, output, prefixes=None):
    """`count` requests as the gateway metered them, one every `every_s` seconds up to now."""
    now = timezone.now()
    for i in range(count):
        UsageRow.objects.create(at=now - timedelta(seconds=every_s * (count - i)), tenant=service.tenant,
                                service_id=service.pk, model=service.name, status=200, prompt_tokens=prompt,
                                completion_tokens=output, duration_ms=5.0,
                                prefix_blocks=None if prefixes is None else prefixes(i))


def _series(service, **figures):
    """Ten minutes of what the engines showed."""
    now = timezone.now()
    for i in range(10):
        SeriesPoint.objects.create(service=service, role=SERVICE_ROLE, time=now - timedelta(seconds=60 * i + 5),
                                   ready_replicas=1, **figures)


def _rules(service):
    return {rule: alternative for rule, alternative, _ in proposals(service, observations(service))}


def test_a_larger_step_budget_when_prefill_dominates_and_itl_has_headroom(tenant_a):
    service = _service(tenant_a, "rag", {"max_num_batched_tokens": 256})
    _load(service, every_s=4, count=150, prompt=3000, output=20)  # 150 tokens of prompt per generated one
    _series(service, ttft_p95=0.9, itl_p95=0.02, kv_usage=0.3, preemptions=0, prompt_tps=750, gen_tps=5)
    [advice] = refresh_advice(service)
    assert advice.rule == "batched_tokens"
    assert advice.alternative == {"name": "max_num_batched_tokens 512",
                                  "engine_settings": {"max_num_batched_tokens": 512}}
    assert advice.inputs["prompt_tps"] == 750 and advice.inputs["gen_tps"] == 5
    # 256-token chunks: 0.068 s of FLOPs under the 76.5 ms weight read, so 12 memory-bound steps of ~79 ms: 0.95 s.
    # 512-token chunks: 0.136 s of FLOPs plus attention, ~0.14 s a step, 6 steps (the last 440 tokens): ~0.84 s.
    predicted = advice.predicted
    assert predicted["figure"] == "ttft_p95_s"
    assert predicted["current"] == pytest.approx(0.95, abs=0.02)
    assert predicted["suggested"] == pytest.approx(0.84, abs=0.02)
    assert predicted["effect_pct"] >= 5.0


def test_a_smaller_step_budget_when_itl_misses_its_slo(tenant_a):
    service = _service(tenant_a, "long", {})
    _load(service, every_s=3, count=200, prompt=6000, output=100)
    _series(service, ttft_p95=1.9, itl_p95=0.15, kv_usage=0.5, preemptions=0, prompt_tps=2000, gen_tps=33)
    shown = {a.rule: a for a in refresh_advice(service)}
    advice = shown["batched_tokens"]
    # vLLM's default budget on a 24 GB GPU is 2048 tokens; half of it. A 2048-token chunk holds every decode of its
    # step for 0.54 s of FLOPs, a 1024-token one for 0.27 s, so decodes beside the long prompts wait less.
    assert advice.alternative == {"name": "max_num_batched_tokens 1024",
                                  "engine_settings": {"max_num_batched_tokens": 1024}}
    predicted = advice.predicted
    assert predicted["figure"] == "itl_p95_s" and predicted["effect_pct"] >= 5.0
    assert predicted["suggested"] < predicted["current"]


def test_no_step_budget_advice_when_neither_prefill_dominates_nor_itl_misses(tenant_a):
    service = _service(tenant_a, "chatty", {})
    _series(service, ttft_p95=0.3, itl_p95=0.02, kv_usage=0.3, preemptions=0, prompt_tps=300, gen_tps=100)
    assert "batched_tokens" not in _rules(service)
    # The halved budget would fall under the service's max_num_seqs, which the engine refuses: not proposed.
    tight = _service(tenant_a, "tight", {"max_num_batched_tokens": 256, "max_num_seqs": 256})
    _series(tight, ttft_p95=0.3, itl_p95=0.2, kv_usage=0.3, preemptions=0, prompt_tps=300, gen_tps=100)
    assert "batched_tokens" not in _rules(tight)


def _documents(i):
    """25 documents asked about in turn: 180 chained 64-character chunks each, then the request's own question."""
    return [1000 * (i % 25) + j for j in range(180)] + [10_000_000 + i]


def test_a_cpu_kv_tier_when_prefixes_are_reused_and_the_gpu_pool_is_full(tenant_a):
    service = _service(tenant_a, "docs", {})
    _load(service, every_s=2, count=300, prompt=3000, output=20, prefixes=_documents)
    _series(service, ttft_p95=0.9, itl_p95=0.05, kv_usage=0.97, preemptions=0, prompt_tps=1500, gen_tps=10,
            prefix_hit_rate=0.8)
    [advice] = refresh_advice(service)
    assert advice.rule == "cpu_kv_tier"
    # The L4's GPU pool holds 52,192 tokens x 128 KiB = 6.4 GiB; 4x is 26 GiB, but a 1-GPU L4 node can give pods
    # 32 - (1 + 320/1024) = 30.69 GiB: 16 for the engine plus 12 GiB and 1.2 of overhead (14 whole) is 30, 13 is 31.
    assert advice.alternative == {"name": "CPU KV tier 12 GiB",
                                  "engine_settings": {"kv_offload": {"backend": "native", "size_gib": 12}}}
    assert advice.inputs["prefix_hit_rate"] == 0.8 and advice.inputs["kv_max"] == 0.97
    # The 275 later turns of the documents must find 0.8 x 300 x 3,000 tokens: 2,618.2 each, in whole 16-token
    # blocks 164 (2,624 tokens), so the replay shares 2,624 of each 3,000-token prompt within a document: x 25
    # documents = 65,600 tokens, more than the GPU pool, which the documents' turns (least recently used first)
    # cycle through, so every prompt is computed whole: 2048 + 952 tokens, 0.56 + 0.27 s, at least 0.84 s. The tier
    # (98,304 tokens) holds them all: 164 blocks (2,624 tokens, 344 MB) come back over PCIe 4 at 25.2 GB/s in
    # 13.7 ms and 376 tokens are computed in 0.109 s + 2 ms: 0.125 s.
    predicted = advice.predicted
    assert predicted["figure"] == "ttft_p50_s"
    assert predicted["current"] >= 0.84
    assert predicted["suggested"] == pytest.approx(0.125, abs=0.003)
    assert predicted["effect_pct"] >= 80


def test_no_cpu_tier_is_advised_with_little_reuse_room_to_spare_or_a_tier_already(tenant_a):
    little = _service(tenant_a, "little", {})
    _series(little, ttft_p95=0.9, itl_p95=0.05, kv_usage=0.97, preemptions=0, prefix_hit_rate=0.1)
    roomy = _service(tenant_a, "roomy", {})
    _series(roomy, ttft_p95=0.9, itl_p95=0.05, kv_usage=0.6, preemptions=0, prefix_hit_rate=0.8)
    tiered = _service(tenant_a, "tiered", {"kv_offload": {"backend": "native", "size_gib": 8}})
    _series(tiered, ttft_p95=0.9, itl_p95=0.05, kv_usage=0.97, preemptions=0, prefix_hit_rate=0.8)
    for service in (little, roomy, tiered):
        assert "cpu_kv_tier" not in _rules(service)


def test_recorded_requests_share_the_deepest_prefix_the_gateway_saw_them_share():
    # Two turns of one conversation (the second extends the first), a question about a document asked twice, and a
    # prompt that shares nothing: by their chained 64-character hashes.
    chains = [[1, 2], [1, 2, 3, 4], [7, 8, 9], [7, 8, 10], [5], None]
    assert shared_prefixes(chains) == ["2", "2", "8", "8", None, None]


def test_the_lab_rows_carry_the_step_budget_and_the_cpu_tier_both_ways():
    from apps.web.forms.lab import AlternativeForm, initial_of

    # An advice card's link fills a lab row; the row gives back the same alternative.
    alternative = {"name": "tier and budget", "engine_settings": {
        "max_num_batched_tokens": 1024, "kv_offload": {"backend": "native", "size_gib": 12}}}
    row = initial_of(alternative)
    assert row == {"name": "tier and budget", "max_num_batched_tokens": 1024, "kv_offload_backend": "native",
                   "kv_offload_size_gib": 12}
    form = AlternativeForm({f"alt0-{k}": v for k, v in row.items()}, prefix="alt0")
    assert form.is_valid() and form.alternative() == alternative


def test_ngram_speculative_decoding_when_a_replica_runs_few_requests_at_once(tenant_a):
    service = _service(tenant_a, "sparse", {})
    _load(service, every_s=10, count=60, prompt=300, output=200)  # 200 decode steps of ~80 ms: about 1.6 at once
    _series(service, ttft_p95=0.2, itl_p95=0.08, kv_usage=0.05, preemptions=0, running=1.6)
    [advice] = refresh_advice(service)
    assert advice.rule == "speculative"
    assert advice.alternative == {"name": "n-gram speculative decoding (3 tokens)",
                                  "engine_settings": {"speculative_method": "ngram", "num_speculative_tokens": 3}}
    assert advice.inputs["running_per_replica_max"] == 1.6
    # Decode alone or in pairs is memory-bound: 76.5 + 2 ms a step either way. With 3 drafts accepted at 0.5 a
    # step emits 1.875 tokens on average: 78.5 / 1.875 = 41.9 ms a token.
    predicted = advice.predicted
    assert predicted["figure"] == "itl_p95_s"
    assert predicted["current"] == pytest.approx(0.0785, abs=0.004)
    assert predicted["suggested"] == pytest.approx(0.0419, abs=0.004)


def test_speculative_decoding_off_when_a_replica_runs_many_requests_at_once(tenant_a):
    service = _service(tenant_a, "busy", {"speculative_method": "ngram", "num_speculative_tokens": 7})
    _load(service, every_s=0.2, count=1500, prompt=100, output=200)  # 5 a second for 300 s
    _series(service, ttft_p95=0.5, itl_p95=0.15, kv_usage=0.8, preemptions=0, running=150)
    [advice] = refresh_advice(service)
    assert advice.rule == "speculative"
    assert advice.alternative == {"name": "speculative decoding off", "engine_settings": {
        "speculative_method": None, "speculative_model": None, "num_speculative_tokens": None}}
    # The load asks for 5 x 200 = 1,000 tokens a second. Verifying 8 tokens for 1.99 emitted costs 8 x 0.2655 ms of
    # compute per 1.99 tokens: at most 938 tokens a second, under the load, so the engine runs compute-bound. Plain
    # decode needs 27 % of the compute and stays memory-bound: with n = 1,000 x ITL sequences of ~200 tokens of
    # context each (128 KiB a token), ITL = 78.5 ms + n x 200 x 131,072 / 210e9, so ITL = 0.0785 / (1 - 0.1248) =
    # 89.7 ms.
    predicted = advice.predicted
    assert predicted["figure"] == "itl_p95_s" and predicted["effect_pct"] >= 5.0
    assert predicted["suggested"] == pytest.approx(0.0897, abs=0.005)
    assert predicted["current"] > predicted["suggested"]


def test_no_speculative_advice_in_between_or_already_where_it_belongs(tenant_a):
    service = _service(tenant_a, "middling", {})
    _series(service, ttft_p95=0.2, itl_p95=0.05, kv_usage=0.3, preemptions=0, running=6)  # over 4: stays off
    assert "speculative" not in _rules(service)
    on = _service(tenant_a, "on-light", {"speculative_method": "ngram", "num_speculative_tokens": 3})
    _series(on, ttft_p95=0.2, itl_p95=0.05, kv_usage=0.3, preemptions=0, running=2)  # under 4: stays on
    assert "speculative" not in _rules(on)


def test_a_lab_row_turns_speculative_decoding_on_or_off():
    from apps.web.forms.lab import AlternativeForm, initial_of

    for alternative in ({"name": "on", "engine_settings": {"speculative_method": "ngram", "num_speculative_tokens": 3}},
                        {"name": "off", "engine_settings": {"speculative_method": None, "speculative_model": None,
                                                            "num_speculative_tokens": None}}):
        row = initial_of(alternative)
        form = AlternativeForm({f"alt0-{k}": v for k, v in row.items()}, prefix="alt0")
        assert form.is_valid() and form.alternative() == alternative
