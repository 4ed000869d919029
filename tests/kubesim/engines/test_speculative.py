"""Speculative decoding in the engine core (n-gram drafting, vLLM's `--speculative-config`): each decode step
verifies k drafted tokens with the last one and emits (1 - a^(k+1)) / (1 - a) tokens on average; the verify is
k + 1 tokens of compute at the sequence's context, so it is nearly free while decode is memory-bound (few
sequences) and costs more than it saves once compute dominates (many).

Hand figures for Llama 3.1 8B on one L4: weights 16.06e9 B read at 0.30e12 x 0.7 = 210e9 B/s (76.5 ms) plus 2 ms a
step; 16.06e9 FLOPs a token at 121e12 x 0.5 = 60.5e12 FLOP/s.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from kubesim.engines import config, flags, speculative
from kubesim.engines.core import Request
from kubesim.engines.harness import pod_context
from kubesim.engines.virtual import VirtualEngine
from kubesim.workload import WorkloadExit


def core(*args, annotations=None):
    ctx = pod_context("vllm/vllm-openai:v0.33.0",
                      ["meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192", *args],
                      gpu_key="l4-24gb", fast_start=False, annotations=annotations or {})
    ns, _ = flags.parse_vllm(flags.command_line(ctx.container, ctx.env))
    return config.vllm_spec(ns, ctx).core


def ngram(k: int) -> list[str]:
    return ["--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": k})]


def mean_itl(cfg, sequences: int) -> float:
    """`sequences` requests of 16 prompt tokens and 101 output tokens arriving together; their mean ITL."""
    engine = VirtualEngine(cfg)
    for i in range(sequences):
        engine.submit(Request(str(i), [i * 100 + t for t in range(16)], 101, 101), 0.0)
    engine.run_until(10_000)
    done = engine.take_finished()
    assert len(done) == sequences and all(r.generated == 101 for r in done)
    return sum((r.last_token - r.first_token) / (r.generated - 1) for r in done) / len(done)


def test_the_ngram_config_sets_the_drafts_and_the_assumed_acceptance():
    cfg = core(*ngram(3))
    assert (cfg.spec_tokens, cfg.spec_acceptance) == (3, 0.5)
    assert cfg.spec_yield() == pytest.approx((1 - 0.5**4) / (1 - 0.5))  # 1.875 tokens a step
    assert core(*ngram(3), annotations={"kubesim.io/spec-acceptance": "0.8"}).spec_acceptance == 0.8
    assert core().spec_yield() == 1.0 and cfg.spec_yield(1) == pytest.approx(1.5)  # fewer drafts where the step is full
    # EAGLE's heads are not a model of their own: not modelled, the engine decodes as without them (and logs it).
    assert core("--speculative-config", json.dumps({"method": "eagle", "model": "d",
                                                    "num_speculative_tokens": 3})).spec_tokens == 0
    with pytest.raises(WorkloadExit):
        core("--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 0}))


def test_one_sequence_decodes_faster_by_the_mean_yield():
    # Alone, a step verifying 4 tokens is as memory-bound as a plain one (64 GFLOP: 1 ms under 76.5 ms): 78.5 ms.
    # 100 tokens after the first at 1.875 a step (1, 2, 2, 2, 2, 2, 2, 2 per 8 steps, the fractions carried):
    # 6 x 8 steps for 90, then 1, 2, 2, 2, 2 and the last 1: 54 steps, 0.54 steps a token: 42.4 ms.
    plain, speculative = mean_itl(core(), 1), mean_itl(core(*ngram(3)), 1)
    assert plain == pytest.approx(16.06e9 / 210e9 + 0.002, rel=0.02)
    assert speculative == pytest.approx(54 / 100 * (16.06e9 / 210e9 + 0.002), rel=0.02)


def test_many_sequences_pay_more_for_the_verify_than_it_saves():
    # 128 sequences verifying 8 tokens each: 1,024 tokens x 16.06e9 FLOPs / 60.5e12 = 0.272 s a step (+2 ms) for
    # (1 - 0.5^8) / 0.5 = 1.99 tokens: 0.138 s a token, where plain decode stays memory-bound near 80 ms.
    plain, speculative = mean_itl(core(), 128), mean_itl(core(*ngram(7)), 128)
    assert plain < 0.1
    assert speculative == pytest.approx(0.274 / 1.992, rel=0.05)


def draft(k: int, model: str = "/models/Llama-3.2-1B-Instruct") -> list[str]:
    return ["--speculative-config", json.dumps({"method": "draft_model", "model": model, "num_speculative_tokens": k})]


def test_a_draft_model_is_resolved_with_its_own_assumed_acceptance():
    cfg = core(*draft(3))
    assert (cfg.spec_tokens, cfg.spec_acceptance, cfg.draft.name) == (3, 0.7, "meta-llama/Llama-3.2-1B-Instruct")
    # Its KV: 2 x 16 layers x 8 KV heads x 64 x 2 bytes a token, kept in the model's blocks.
    assert cfg.draft_kv_bytes_per_token_rank == 2 * 16 * 8 * 64 * 2
    with pytest.raises(WorkloadExit, match="needs the draft's `model`"):
        core("--speculative-config", json.dumps({"method": "draft_model", "num_speculative_tokens": 3}))


def test_the_draft_model_takes_its_weights_and_its_kv_off_the_cache():
    # Without a draft, the L4's budget holds `plain` blocks of 16 x 131,072 B (Llama 3.1 8B's KV a token). The draft
    # loads 1.24e9 x 2 B of weights beside the model, and each block also holds its 16 x 32,768 B of KV.
    plain, with_draft = core().num_blocks, core(*draft(3)).num_blocks
    budget = plain * 16 * 131072
    expected = (budget - 1.24e9 * 2) / (16 * (131072 + 32768))
    assert abs(with_draft - expected) <= 2


def test_one_sequence_pays_for_the_draft_passes_and_still_decodes_faster():
    # A step verifies 4 tokens (memory-bound: 78.5 ms, as above) after 3 passes of the 1B draft: its 2.48e9 B of
    # weights at 210e9 B/s plus 2 ms, 13.8 ms each: 119.9 ms a step. At acceptance 0.7 a step emits
    # (1 - 0.7^4) / 0.3 = 2.533 tokens: 2, 3, 2, 3, ... carried, 98 tokens after 39 steps and the last 2 in the 40th.
    step = (16.06e9 / 210e9 + 0.002) + 3 * (2.48e9 / 210e9 + 0.002)
    assert mean_itl(core(*draft(3)), 1) == pytest.approx(40 / 100 * step, rel=0.02)
    # The same drafts from the prompt (n-gram) cost no GPU time: more tokens a step, no draft passes.
    assert mean_itl(core(*ngram(3), annotations={"kubesim.io/spec-acceptance": "0.7"}), 1) == pytest.approx(
        40 / 100 * (16.06e9 / 210e9 + 0.002), rel=0.02)


def test_the_acceptance_rate_engines_report_inverts_to_the_chance_a_draft_is_accepted():
    # At a = 0.7 and 3 drafts a step accepts 2.533 - 1 = 1.533 of 3 drafted tokens: a rate of 0.511.
    assert speculative.acceptance_for_rate((1 - 0.7**4) / 0.3 / 3 - 1 / 3, 3) == pytest.approx(0.7, abs=1e-3)
    assert speculative.acceptance_for_rate(0.0, 3) == pytest.approx(0.0, abs=1e-3)
    assert speculative.acceptance_for_rate(1.0, 5) == pytest.approx(1.0, abs=1e-3)


def test_the_engine_exports_vllms_speculative_counters():
    """One request of 101 tokens out through a live engine: 40 speculative decodes after the first token (as above)
    drafted 3 tokens each and accepted 100 - 40 = 60 of them."""
    from kubesim.engines.harness import start
    from tests.kubesim.engines.test_physics import scrape

    async def go():
        ctx = pod_context("vllm/vllm-openai:v0.33.0", ["meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192",
                                                      *draft(3)],
                          gpu_key="l4-24gb", fast_start=False, annotations={"kubesim.io/time-scale": "20"})
        w = await start(ctx)
        try:
            async with aiohttp.ClientSession() as s:
                body = {"model": w.spec.served_names[0], "prompt": "a b c d", "max_tokens": 101, "ignore_eos": True}
                async with s.post(w.base_url + "/v1/completions", json=body) as r:
                    assert r.status == 200, await r.text()
                async with s.get(w.base_url + "/metrics") as r:
                    return scrape(await r.text())
        finally:
            await w.stop()

    m = asyncio.run(go())
    assert m["vllm:spec_decode_num_drafts_total"] == 40
    assert m["vllm:spec_decode_num_draft_tokens_total"] == 120
    assert m["vllm:spec_decode_num_accepted_tokens_total"] == 60
    # Each step emitted 2 or 3 tokens: the first drafted position accepted 40 times, the second 20, the third never.
    per_pos = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    assert m[per_pos] == 60 and m[f'{per_pos}{{"engine": "0", "model_name": "meta-llama/Llama-3.1-8B-Instruct", '
                                  f'"position": "1"}}'] == 20
