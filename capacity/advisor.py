"""The sizing advisor: which GPU kind × TP × replicas serves a request rate within a TTFT objective.

The model (documented in docs/capacity.md) is the roofline kubesim's engines step with:

- each replica gets rate λ = R / replicas (the router spreads Poisson arrivals evenly);
- in steady state a replica runs a decode batch B = λ × O × t, where t is the step time (roofline of B
  decodes at the mean context P + O/2 plus the prompt tokens arriving in one step, λ × P × t); the
  fixed point is found by iteration and does not exist when the replica is saturated;
- a new request waits for the current step, then prefills in chunks that share their steps with the B
  decodes (S seconds); prefills queue behind one another, an M/M/1 queue with utilisation ρ = λ × S,
  whose 95th percentile wait is S / (1 − ρ) × ln(20ρ) (zero when 20ρ ≤ 1);
- TTFT p95 ≈ t + S + that wait; an option qualifies when it is below the SLO, the batch fits
  `max_num_seqs` and the KV cache holds the batch's tokens.

Options are ranked by GPUs in total, then by GPU-hours per million tokens (prompt plus output).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from capacity import arch as a
from capacity.gpus import GPUS, Gpu
from capacity.plan import Knobs, plan
from capacity.roofline import ReplicaRates, Roofline, replica_rates

MAX_REPLICAS = 64


@dataclass(frozen=True)
class Suggestion:
    """One way to serve the load: `replicas` engines of `tp` GPUs of kind `gpu`, with the predicted figures."""

    gpu: str
    gpu_label: str
    tp: int
    replicas: int
    gpus: int
    gpu_hours_per_million_tokens: float
    ttft_p95_s: float
    decode_batch: float
    max_model_len: int
    gpu_memory_utilization: float
    kv_cache_dtype: str

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Load:
    """The traffic to size for: requests per second, tokens per request, the TTFT objective (seconds)."""

    rate: float
    prompt_tokens: int
    output_tokens: int
    ttft_slo_s: float

    def errors(self) -> dict[str, str]:
        out = {}
        if not self.rate > 0:
            out["rate"] = "must be a positive number of requests per second"
        if self.prompt_tokens < 1:
            out["prompt_tokens"] = "must be at least 1"
        if self.output_tokens < 1:
            out["output_tokens"] = "must be at least 1"
        if not self.ttft_slo_s > 0:
            out["ttft_slo"] = "must be a positive number of seconds"
        return out


def needed_max_model_len(model: a.ModelArch, load: Load) -> int:
    """Prompt plus output rounded up to a multiple of 1024, within the model's context."""
    return min(model.max_context, math.ceil((load.prompt_tokens + load.output_tokens) / 1024) * 1024)


def plan_rates(model: a.ModelArch, gpu: Gpu, tp: int, knobs: Knobs) -> ReplicaRates | None:
    """A replica's prefill rate and decode step for the autoscaler (None when it does not fit): the roofline the
    advisor and kubesim's engines step by, chunked by the engine's batched-token budget."""
    p = plan(model, gpu, tp, knobs, search=False)
    if not p.fits:
        return None
    wbytes = a.weight_bytes_per_param(knobs.quantization, model.dtype_bytes)
    roof = Roofline(model, gpu, tp, model.weights_bytes(wbytes, tp), p.kv_bytes_per_token)
    chunk = knobs.max_num_batched_tokens or (a.sglang_default_chunked_prefill(gpu) if knobs.engine == "sglang"
                                             else a.vllm_default_batched_tokens(gpu))
    return replica_rates(roof, chunk)


def replica_figures(model: a.ModelArch, gpu: Gpu, tp: int, load: Load, rate: float,
                    knobs: Knobs) -> tuple[float, float] | None:
    """(TTFT p95 seconds, decode batch) of one replica at `rate` requests/s; None when it saturates."""
    p = plan(model, gpu, tp, knobs, search=False)
    if not p.fits:
        return None
    wbytes = a.weight_bytes_per_param(knobs.quantization, model.dtype_bytes)
    roof = Roofline(model, gpu, tp, model.weights_bytes(wbytes, tp), p.kv_bytes_per_token)
    chunk = knobs.max_num_batched_tokens or a.vllm_default_batched_tokens(gpu)
    max_seqs = a.vllm_default_max_num_seqs(gpu)
    prompt, out = load.prompt_tokens, load.output_tokens
    ctx = prompt + out // 2
    t = roof.step_time([], [ctx])
    for _ in range(200):
        batch = rate * out * t
        if batch > max_seqs or batch * (prompt + out) > p.max_tokens or t > 60:
            return None
        arriving = min(chunk, max(1, round(rate * prompt * t)))
        t_next = roof.step_time([(0, arriving)], [ctx] * max(1, math.ceil(batch)))
        if abs(t_next - t) < 1e-6:
            t = t_next
            break
        t = t_next
    else:
        return None
    batch = rate * out * t
    service = roof.prefill_seconds(prompt, chunk, [ctx] * max(1, math.ceil(batch)))
    rho = rate * service
    if rho >= 1:
        return None
    wait = service / (1 - rho) * math.log(20 * rho) if 20 * rho > 1 else 0.0
    return t + service + wait, batch


def suggest(model: a.ModelArch, load: Load, *, kv_cache_dtype: str = "auto", gpu_memory_utilization: float = 0.9,
            gpus: dict[str, Gpu] | None = None, limit: int = 10) -> list[Suggestion]:
    """Every GPU kind × TP (one node) with the fewest replicas that meet the load, best first."""
    max_len = needed_max_model_len(model, load)
    knobs = Knobs(kv_cache_dtype=kv_cache_dtype, gpu_memory_utilization=gpu_memory_utilization,
                  max_model_len=max_len)
    tokens_per_hour = load.rate * (load.prompt_tokens + load.output_tokens) * 3600
    options = []
    for gpu in (GPUS if gpus is None else gpus).values():
        for tp in range(1, gpu.max_gpus_per_node + 1):
            if model.tp_error(tp) or not plan(model, gpu, tp, knobs, search=False).fits:
                continue
            for replicas in range(1, MAX_REPLICAS + 1):
                figures = replica_figures(model, gpu, tp, load, load.rate / replicas, knobs)
                if figures is not None and figures[0] <= load.ttft_slo_s:
                    total = replicas * tp
                    options.append(Suggestion(
                        gpu=gpu.key, gpu_label=gpu.label, tp=tp, replicas=replicas, gpus=total,
                        gpu_hours_per_million_tokens=round(total / (tokens_per_hour / 1e6), 4),
                        ttft_p95_s=round(figures[0], 4), decode_batch=round(figures[1], 1), max_model_len=max_len,
                        gpu_memory_utilization=gpu_memory_utilization, kv_cache_dtype=kv_cache_dtype,
                    ))
                    break
    options.sort(key=lambda s: (s.gpus, s.gpu_hours_per_million_tokens, s.ttft_p95_s))
    return options[:limit]
