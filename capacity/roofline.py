"""The roofline of one engine step: FLOPs for prefill, memory bandwidth for decode, all-reduce at TP > 1.

kubesim's engines time every step with it, and the sizing advisor predicts TTFT and throughput with it,
so a suggestion and the simulation that checks it share one model. Achieved fractions of the nominal
figures follow reference/gpus-and-models.md (40-60% of FLOP/s in prefill, 60-80% of bandwidth in decode).
"""

from __future__ import annotations

from dataclasses import dataclass

from capacity.arch import ModelArch
from capacity.gpus import Gpu

ALLREDUCE_LATENCY_S = 8e-6
PREFILL_FLOPS_FRACTION = 0.5
DECODE_BANDWIDTH_FRACTION = 0.7
STEP_OVERHEAD_S = 0.002  # scheduler, sampling and kernel launches per step


@dataclass(frozen=True)
class Roofline:
    """Step times of one engine instance (one tensor-parallel group) of `model` on `gpu`."""

    model: ModelArch
    gpu: Gpu
    tp: int
    weight_bytes_rank: float
    kv_bytes_per_token_rank: float
    flops_fraction: float = PREFILL_FLOPS_FRACTION
    bandwidth_fraction: float = DECODE_BANDWIDTH_FRACTION
    step_overhead_s: float = STEP_OVERHEAD_S

    def step_time(self, prefill: list[tuple[int, int]], decode_ctx: list[int]) -> float:
        """One step with prefill chunks (start, length) and decodes at the given context lengths.

        Compute: 2 x active parameters per token (dense) plus 4 x layers x hidden per attended pair;
        memory: the rank's weights plus the KV it reads; the step takes the longer of the two. With TP,
        two ring all-reduces of the activations per layer add a latency plus 2(tp-1)/tp of the bytes.
        """
        tokens = len(decode_ctx)
        attn = 0.0
        for start, n in prefill:
            tokens += n
            attn += n * (start + n / 2)
        kv_ctx = sum(decode_ctx)
        attn += kv_ctx
        return self._seconds(tokens, attn, kv_ctx + sum(start + n for start, n in prefill))

    def decode_time(self, seqs: int, context: int) -> float:
        """`step_time` of `seqs` decodes whose contexts add up to `context` tokens (no list to build)."""
        return self._seconds(seqs, context, context)

    def _seconds(self, tokens: int, attn: float, kv_read: int) -> float:
        m = self.model
        flops = (2 * m.active * tokens + 4 * m.layers * m.hidden * attn) / self.tp
        compute = flops / (self.gpu.flops * self.flops_fraction)
        memory = (self.weight_bytes_rank + kv_read * self.kv_bytes_per_token_rank) / (
            self.gpu.bandwidth * self.bandwidth_fraction
        )
        comm = 0.0
        if self.tp > 1:
            volume = tokens * m.hidden * 2 * 2 * (self.tp - 1) / self.tp
            comm = 2 * m.layers * (ALLREDUCE_LATENCY_S + volume / self.gpu.interconnect)
        return max(compute, memory) + comm + self.step_overhead_s

    def prefill_seconds(self, prompt_len: int, chunk: int, decode_ctx: list[int] | None = None) -> float:
        """One prompt's prefill alone (or beside `decode_ctx` decodes), in chunks of `chunk` tokens."""
        t, start = 0.0, 0
        chunk = max(chunk, 1)
        while start < prompt_len:
            n = min(chunk, prompt_len - start)
            t += self.step_time([(start, n)], decode_ctx or [])
            start += n
        return t


# A typical context for the decode-rate fit (tokens attended per running sequence) and the prompt length the
# prefill rate is quoted at: the autoscaler's rates are these, the fleet's floors the exact `prefill_seconds`.
RATE_CONTEXT_TOKENS = 1024
RATE_PROMPT_TOKENS = 2048


@dataclass(frozen=True)
class ReplicaRates:
    """What one replica can do, for an autoscaler: prompt tokens prefilled per second (alone, in chunks of the
    engine's batched-token budget) and a decode step's time as `decode_base_s + decode_per_seq_s × running
    sequences` (a straight line through the roofline at 1 and 64 sequences of `RATE_CONTEXT_TOKENS`)."""

    prefill_tokens_per_s: float
    decode_base_s: float
    decode_per_seq_s: float

    def decode_step_s(self, running: float) -> float:
        return self.decode_base_s + self.decode_per_seq_s * max(running, 1.0)

    def as_dict(self) -> dict:
        return {"prefill_tokens_per_s": round(self.prefill_tokens_per_s, 1),
                "decode_base_s": round(self.decode_base_s, 5), "decode_per_seq_s": round(self.decode_per_seq_s, 7)}


def replica_rates(roof: Roofline, chunk: int) -> ReplicaRates:
    """The one definition of a replica's prefill rate and decode step for scaling decisions."""
    prefill = RATE_PROMPT_TOKENS / roof.prefill_seconds(RATE_PROMPT_TOKENS, chunk)
    one = roof.step_time([], [RATE_CONTEXT_TOKENS])
    many = roof.step_time([], [RATE_CONTEXT_TOKENS] * 64)
    return ReplicaRates(prefill, one - (many - one) / 63, (many - one) / 63)


def spec_yield(k: int, a: float) -> float:
    """Tokens a decode step emits per sequence on average: (1 - a^(k+1)) / (1 - a) for k drafted tokens each
    accepted with chance a until the first rejection, plus the token the verify samples itself (Leviathan, Kalman
    and Matias 2023, eq. 1); 1 without drafts. Engines report (yield - 1) / k: accepted over drafted tokens."""
    if k <= 0:
        return 1.0
    return float(k + 1) if a >= 1 else (1 - a ** (k + 1)) / (1 - a)
