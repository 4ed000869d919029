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
        m = self.model
        tokens = len(decode_ctx)
        attn = 0.0
        for start, n in prefill:
            tokens += n
            attn += n * (start + n / 2)
        kv_ctx = sum(decode_ctx)
        attn += kv_ctx
        flops = (2 * m.active * tokens + 4 * m.layers * m.hidden * attn) / self.tp
        compute = flops / (self.gpu.flops * self.flops_fraction)
        kv_read = kv_ctx + sum(start + n for start, n in prefill)
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
