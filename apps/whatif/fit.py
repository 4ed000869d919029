"""Fitting the engine model's step-time coefficients to a service's observed latencies (`manage.py calibrate`).

The lab's physics are the roofline of `capacity.roofline` with three achieved fractions: of the GPU's FLOP/s in
prefill, of its memory bandwidth in decode, and a fixed overhead per step (defaults 0.5, 0.7 and 2 ms, from
reference/gpus-and-models.md). Real hardware, drivers and engine versions differ; this module fits the three to
what the service's engines reported over a window, through the same roofline (never a copy of its formulas):

- decode: each stored interval's ITL p50 is one decode step of the interval's batch (running requests per
  ready replica, each attending the window's mean prompt plus half its mean output). For each bandwidth
  fraction on a grid, the step overhead that best fits (the mean residual, least squares for a constant, kept
  within 0-20 ms) is taken, and the fraction with the least squared error wins;
- prefill: intervals without waiting requests, whose TTFT p50 is then the prefill of the window's median prompt
  (less the interval's prefix-cache hits) in the engine's chunks beside the interval's decodes, with the
  decode fit above; the FLOP/s fraction with the least squared error on a grid wins.

An interval's p50 is not a step time, so the fit is an estimate; it reports how many intervals it used and the
fitted model's mean error on them. Applied (`--apply`), the lab replays the service with these coefficients
(`lab_physics`), as kubesim's `kubesim.io/<name>` pod annotations would set them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from capacity import roofline
from capacity.roofline import Roofline

BANDWIDTH_GRID = [round(0.2 + 0.01 * i, 2) for i in range(81)]  # 0.20 ... 1.00
FLOPS_GRID = [round(0.05 + 0.01 * i, 2) for i in range(96)]  # 0.05 ... 1.00
MAX_OVERHEAD_S = 0.02
MIN_SAMPLES = 3
# The coefficients as kubesim's engines read them from pod annotations (kubesim.engines.hardware.physics_for).
ANNOTATIONS = {"prefill_flops_fraction": "kubesim.io/prefill-flops-fraction",
               "decode_bandwidth_fraction": "kubesim.io/decode-bandwidth-fraction",
               "step_overhead_ms": "kubesim.io/step-overhead-ms"}


class FitError(ValueError):
    """Too little telemetry to fit; the message says what is missing."""


@dataclass(frozen=True)
class Interval:
    """What one stored interval showed: latencies, the batch per replica, waiting requests and prefix hits."""

    itl_p50: float | None
    ttft_p50: float | None
    running_per_replica: float
    waiting: float
    prefix_hit_rate: float


@dataclass(frozen=True)
class Fit:
    prefill_flops_fraction: float | None  # None: no interval without waiting requests to fit it on
    decode_bandwidth_fraction: float
    step_overhead_ms: float
    decode_samples: int
    prefill_samples: int
    itl_error_pct: float  # the fitted model's mean absolute error on the decode intervals
    ttft_error_pct: float | None

    def coefficients(self) -> dict:
        out = {"decode_bandwidth_fraction": self.decode_bandwidth_fraction, "step_overhead_ms": self.step_overhead_ms}
        if self.prefill_flops_fraction is not None:
            out["prefill_flops_fraction"] = self.prefill_flops_fraction
        return out


def _roof(base: Roofline, flops: float, bandwidth: float, overhead_s: float) -> Roofline:
    return Roofline(base.model, base.gpu, base.tp, base.weight_bytes_rank, base.kv_bytes_per_token_rank,
                    flops_fraction=flops, bandwidth_fraction=bandwidth, step_overhead_s=overhead_s)


def _mean_abs_pct(pairs: list[tuple[float, float]]) -> float:
    return round(100 * statistics.fmean(abs(p - o) / o for p, o in pairs), 1)


def fit(base: Roofline, chunk: int, intervals: list[Interval], mean_prompt: float, mean_output: float,
        median_prompt: int) -> Fit:
    """The coefficients that best explain `intervals` on the engine whose roofline (with any coefficients) is
    `base` and whose batched-token budget is `chunk`; raises FitError with fewer than MIN_SAMPLES decode intervals."""
    ctx = int(mean_prompt + mean_output / 2)
    decode = [(max(1, round(i.running_per_replica)), i.itl_p50) for i in intervals
              if i.itl_p50 and i.itl_p50 > 0 and i.running_per_replica >= 0.5]
    if len(decode) < MIN_SAMPLES:
        raise FitError(f"{len(decode)} intervals with decoding requests and an ITL p50 in the window; "
                       f"at least {MIN_SAMPLES} are needed")
    best = None
    for bandwidth in BANDWIDTH_GRID:
        roof = _roof(base, roofline.PREFILL_FLOPS_FRACTION, bandwidth, 0.0)
        base_times = [roof.step_time((), [ctx] * b) for b, _ in decode]
        overhead = min(max(statistics.fmean(y - t for (_, y), t in zip(decode, base_times, strict=True)), 0.0),
                       MAX_OVERHEAD_S)
        error = sum((t + overhead - y) ** 2 for (_, y), t in zip(decode, base_times, strict=True))
        if best is None or error < best[0]:
            best = (error, bandwidth, overhead, [t + overhead for t in base_times])
    _, bandwidth, overhead, predicted = best
    itl_error = _mean_abs_pct([(p, y) for p, (_, y) in zip(predicted, decode, strict=True)])
    prefill = [(i, i.ttft_p50) for i in intervals if i.ttft_p50 and i.ttft_p50 > 0 and i.waiting < 0.5]
    flops, ttft_error = None, None
    if len(prefill) >= MIN_SAMPLES:
        best_p = None
        for fraction in FLOPS_GRID:
            roof = _roof(base, fraction, bandwidth, overhead)
            guesses = [roof.prefill_seconds(max(1, round(median_prompt * (1 - i.prefix_hit_rate))), chunk,
                                            [ctx] * round(i.running_per_replica)) for i, _ in prefill]
            error = sum((g - y) ** 2 for g, (_, y) in zip(guesses, prefill, strict=True))
            if best_p is None or error < best_p[0]:
                best_p = (error, fraction, guesses)
        _, flops, guesses = best_p
        ttft_error = _mean_abs_pct([(g, y) for g, (_, y) in zip(guesses, prefill, strict=True)])
    return Fit(flops, bandwidth, round(overhead * 1000, 2), len(decode), len(prefill), itl_error, ttft_error)
