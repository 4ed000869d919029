"""What a CPU tier of the KV cache buys, simulated: TTFT p95, throughput and hit rates without and with one,
and the reuse curve's estimate of the hit rate at twice a tier's size against what kubesim measures there.

    .venv/bin/python bench/kv_tiers.py [--json] [--duration SECONDS] [--rate REQ_PER_S]

The workload is the routing bench's (bench/engine_sim.py): 12 tenants, each with a 3000-token shared prefix
and a unique 200-word question, drawn uniformly at Poisson arrivals. One simulated vLLM 0.33 engine serves
Llama-3.1-8B on an L4 with 801 KV blocks (800 usable, 12,800 tokens: about four of the 3,203-token prompts),
as when the GPU's KV cache holds only part of the tenants' prefixes.

1. none vs cpu_tier: the same arrivals without a tier and with `--kv-offloading-size 6` (6 GiB: 3,072 blocks,
   every prefix with room for the unique questions). TTFT p95 (simulated seconds, arrival to first token) and
   throughput (generated tokens over the time from the first arrival to the last completion). Hit rates of the
   cpu_tier run as the engine's counters give them: `prefix_cache_hits / queries` (GPU) and
   `external_prefix_cache_hits / queries` (CPU tier).
2. The curve: a run with a tier of 1.5625 GiB (800 blocks, the GPU's size) builds the reuse curve
   (capacity.reuse) from the requests it looked up; its hit rate at twice that size is compared with both
   tiers' hit rate ((GPU + CPU hits) / queries) of a run with the tier at 3.125 GiB. The curve is built twice:
   from the engine's own 16-token blocks, and as a service's gateway builds it, from 64-character chunks of the
   prompts' text (gateway/prefix.py; what the service page and GET /api/v1/services/{id}/kv-reuse/ show).

The last line with --json is one JSON object: ttft_p95_s and throughput_tok_s ({none, cpu_tier}),
hit_rate ({gpu, cpu}) and curve ({predicted_hit_rate_2x, measured_hit_rate_2x}).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from engine_sim import LLAMA, p95, tenant_prefixes, tenant_request
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from capacity.reuse import ReuseSample
from enginevocab.vllm import IMAGE_REF
from gateway.prefix import CHUNK_CHARS, prefix_blocks
from kubesim.engines import config, flags
from kubesim.engines.blocks import block_hashes
from kubesim.engines.core import Clock, EngineCore
from kubesim.engines.harness import pod_context
from kubesim.engines.metrics import VllmMetrics
from kubesim.engines.request import Request
from kubesim.engines.tokenizer import tokenize

GPU_BLOCKS = 801  # 800 usable beside vLLM's null block
FULL_TIER_GIB = 6.0  # 6 GiB / 2 MiB a block = 3072 blocks: all 12 prefixes (187 blocks each) and the questions
CURVE_TIER_GIB = 1.5625  # 800 blocks, the GPU pool's size
OUTPUT_TOKENS = 64
BENCH_KEY = b"bench"  # any key: the curve depends on which hashes are equal, not on their values


def engine(tier_gib: float | None, scale: float, seed: int) -> tuple[EngineCore, VllmMetrics, int]:
    """A simulated vLLM on one L4 with GPU_BLOCKS KV blocks and, given `tier_gib`, a native CPU tier."""
    args = [LLAMA, "--max-model-len", "8192", "--num-gpu-blocks-override", str(GPU_BLOCKS)]
    if tier_gib:
        args += ["--kv-offloading-size", str(tier_gib)]
    ctx = pod_context(IMAGE_REF, args, gpu_key="l4-24gb", annotations={"kubesim.io/time-scale": str(scale)},
                      seed=seed)
    spec = config.vllm_spec(flags.parse_vllm(flags.command_line(ctx.container, ctx.env))[0], ctx)
    cfg = spec.core
    metrics = VllmMetrics(LLAMA, "0", cfg.max_model_len, spec.cache_info, False, 1, False, True,
                          tier_backend=cfg.cpu_tier.backend if cfg.cpu_tier else None)
    core = EngineCore(cfg, Clock(scale), metrics)
    core.start()
    return core, metrics, cfg.cpu_tier.blocks if cfg.cpu_tier else 0


def counters(metrics: VllmMetrics) -> dict[str, float]:
    """The engine's counters as a scrape of its /metrics reads them (unlabelled sums)."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for s in fam.samples:
            if s.name.endswith("_total"):
                out[s.name] = out.get(s.name, 0.0) + s.value
    return out


class GatewaySample:
    """The curve as a service's gateway builds it (gateway/prefix.py, apps/gateway/kv_reuse.py): 64-character
    chunks of the prompt's text, sizes converted with the prompts' own characters per token."""

    def __init__(self):
        self.sample = ReuseSample(block_size=CHUNK_CHARS)
        self.chars = self.tokens = 0

    def observe(self, text: str, tokens: int) -> None:
        self.sample.observe(prefix_blocks(text, BENCH_KEY), len(text))
        self.chars, self.tokens = self.chars + len(text), self.tokens + tokens

    def hit_rate(self, cache_tokens: float) -> float:
        return self.sample.hit_rate(cache_tokens * self.chars / self.tokens / CHUNK_CHARS)


async def run(tier_gib: float | None, rate: float, duration: float, seed: int, scale: float,
              sample: ReuseSample | None = None, gateway: GatewaySample | None = None) -> dict:
    """Drive the workload's Poisson arrivals (simulated seconds) into one engine; its figures."""
    core, metrics, tier_blocks = engine(tier_gib, scale, seed)
    rng = random.Random(seed)
    prefixes = tenant_prefixes()
    reqs: list[Request] = []
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= duration:
            break
        await core.clock.sleep_until(t)
        text = tenant_request(rng, prefixes)
        tokens = tokenize(text)
        if sample is not None:
            sample.observe(block_hashes(tokens, core.cfg.block_size), len(tokens))
        if gateway is not None:
            gateway.observe(text, len(tokens))
        reqs.append(core.add(Request(f"r{len(reqs)}", tokens, OUTPUT_TOKENS, OUTPUT_TOKENS)))
    await asyncio.gather(*(r.done for r in reqs))
    await core.stop()
    c = counters(metrics)
    queries = c["vllm:prefix_cache_queries_total"]
    span = max(r.last_token for r in reqs) - min(r.arrival for r in reqs)
    return {
        "requests": len(reqs),
        "tier_blocks": tier_blocks,
        "ttft_p95_s": p95([r.first_token - r.arrival for r in reqs]),
        "throughput_tok_s": sum(r.generated for r in reqs) / span,
        "gpu_hit_rate": c["vllm:prefix_cache_hits_total"] / queries,
        "cpu_hit_rate": c["vllm:external_prefix_cache_hits_total"] / queries,
        "lost_s": core.lost_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="end with one JSON object of the figures")
    parser.add_argument("--duration", type=float, default=300.0, help="simulated seconds of arrivals")
    parser.add_argument("--rate", type=float, default=0.4, help="requests per simulated second")
    parser.add_argument("--scale", type=float, default=8.0, help="simulated seconds per wall second")
    parser.add_argument("--seed", type=int, default=1)
    a = parser.parse_args()
    go = lambda gib, sample=None, gateway=None: asyncio.run(  # noqa: E731
        run(gib, a.rate, a.duration, a.seed, a.scale, sample, gateway))
    none, tier = go(None), go(FULL_TIER_GIB)
    sample, gateway = ReuseSample(block_size=16), GatewaySample()
    base = go(CURVE_TIER_GIB, sample, gateway)
    doubled = go(2 * CURVE_TIER_GIB)
    predicted = sample.hit_rate(2 * base["tier_blocks"])
    measured = doubled["gpu_hit_rate"] + doubled["cpu_hit_rate"]
    print(f"Llama-3.1-8B on L4, {GPU_BLOCKS - 1} GPU KV blocks; 12 tenants x 3000-token prefixes, {a.rate:g} req/s "
          f"for {a.duration:g} simulated s ({none['requests']} requests, {OUTPUT_TOKENS} tokens out)")
    for name, r in (("none", none), (f"cpu_tier {FULL_TIER_GIB:g} GiB", tier)):
        print(f"  {name:<18} TTFT p95 {r['ttft_p95_s'] * 1000:8.0f} ms   throughput {r['throughput_tok_s']:7.1f} tok/s"
              f"   hit rate GPU {r['gpu_hit_rate']:.3f} CPU {r['cpu_hit_rate']:.3f}   (loop lost {r['lost_s']:.2f} s)")
    print(f"  TTFT p95 none / cpu_tier: {none['ttft_p95_s'] / tier['ttft_p95_s']:.1f}x lower with the tier; "
          f"throughput cpu_tier / none: {tier['throughput_tok_s'] / none['throughput_tok_s']:.2f}x")
    print(f"  reuse curve from the {CURVE_TIER_GIB:g} GiB run ({base['tier_blocks']} blocks): hit rate there "
          f"{sample.hit_rate(base['tier_blocks']):.3f} predicted, {base['gpu_hit_rate'] + base['cpu_hit_rate']:.3f} "
          f"measured; at 2x ({2 * CURVE_TIER_GIB:g} GiB) {predicted:.3f} predicted, {measured:.3f} measured "
          f"({abs(predicted - measured) * 100:.1f} points apart; knee {sample.knee() * 16} tokens)")
    from_text = gateway.hit_rate(2 * base["tier_blocks"] * 16)
    print(f"  the same curve from the gateway's 64-character chunks of the prompts' text "
          f"({gateway.chars / gateway.tokens:.2f} characters a token): at 2x {from_text:.3f} predicted "
          f"({abs(from_text - measured) * 100:.1f} points from the measured)")
    if a.json:
        print(json.dumps({
            "ttft_p95_s": {"none": round(none["ttft_p95_s"], 4), "cpu_tier": round(tier["ttft_p95_s"], 4)},
            "throughput_tok_s": {"none": round(none["throughput_tok_s"], 2),
                                 "cpu_tier": round(tier["throughput_tok_s"], 2)},
            "hit_rate": {"gpu": round(tier["gpu_hit_rate"], 4), "cpu": round(tier["cpu_hit_rate"], 4)},
            "curve": {"predicted_hit_rate_2x": round(predicted, 4), "measured_hit_rate_2x": round(measured, 4)},
        }))


if __name__ == "__main__":
    main()
