"""The built-in autoscaler's SLO guard (TTFT / ITL p95 against their targets) and the words its decisions say
(`rules`; pure)."""

from __future__ import annotations

import math

from apps.serving.scaling_policy import PoolPolicy

_LABELS = {
    "waiting_requests_per_replica": ("waiting", " per replica"),
    "running_requests_per_replica": ("running", " per replica"),
    "kv_cache_usage": ("KV-cache usage", ""),
    "prompt_tokens_per_s_per_replica": ("prompt tokens/s", " per replica"),
    "generation_tokens_per_s_per_replica": ("generated tokens/s", " per replica"),
}


def replica_count(n: int) -> str:
    """`1 replica`, `3 replicas`: reasons are read by people."""
    return f"{n} replica" if n == 1 else f"{n} replicas"


def _fmt(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}" if abs(value) < 1000 else f"{value:.0f}"


def metric_words(m) -> str:
    """A metric's result (`rules.MetricResult`) in words."""
    label, per = _LABELS.get(m.name, (m.name, ""))
    if m.value is None:
        return f"{label}: no pod reported it"
    sign = ">" if m.ratio > 1 else "<" if m.ratio < 1 else "="
    missing = f", {m.missing} pod(s) without it" if m.missing else ""
    return f"{label} {_fmt(m.value)}{per} {sign} target {_fmt(m.target)} (×{m.ratio:.2f}{missing})"


def prefill_floor_words(policy: PoolPolicy, obs) -> str:
    """Why a TTFT p95 over its target asks for no replica: it is the prompts' own prefill time (its floor),
    and the part above the floor is within the target taken as a queueing allowance. Empty otherwise."""
    value, floor, target = obs.ttft_p95_s, obs.ttft_floor_p95_s, policy.ttft_p95_s
    if value is None or floor is None or target is None or value <= target or value - floor > target:
        return ""
    return (f"TTFT p95 {_fmt(value)} s is the prompts' own prefill time (floor {_fmt(floor)} s): more replicas "
            "would not help")


def slo_guard(policy: PoolPolicy, obs, drains: str = "") -> tuple[int | None, int | None, str]:
    """(scale-up recommendation, floor, words) from TTFT / ITL p95 against their targets.

    Where the prompts' prefill floor is known, TTFT is judged by the part above it (the per-request budget:
    the target as a queueing allowance plus the prompt's own prefill time), so long prompts alone never
    ask for replicas (`prefill_floor_words`)."""
    up, floor, words = None, None, ""
    for label, value, target in (("TTFT p95", obs.ttft_p95_s, policy.ttft_p95_s),
                                 ("ITL p95", obs.itl_p95_s, policy.itl_p95_s)):
        if value is None or target is None or obs.replicas == 0:
            continue
        if label == "ITL p95" and obs.rates is not None:
            continue  # decode pressure (signals) models what a replica more does to ITL; its p95 alone cannot
        if label == "TTFT p95" and obs.ttft_floor_p95_s is not None:
            value = max(value - obs.ttft_floor_p95_s, 0.0)
            label = "TTFT p95 above the prefill floor"
        ratio = value / target
        if ratio > 1.0 and label != "ITL p95" and drains:
            # A TTFT made in a queue that is gone before a new replica could serve: no replica, no scale-down.
            floor = obs.replicas if floor is None else floor
            words = words or f"{label} {_fmt(value)} s > target {_fmt(target)} s, but {drains}: no scale-up"
            continue
        if ratio > 1.0:
            # Latency does not fall in proportion to replicas; ask for one more, up to double, per evaluation.
            wanted = max(obs.replicas + 1, math.ceil(obs.replicas * min(ratio, 2.0)))
            if up is None or wanted > up:
                up, words = wanted, f"{label} {_fmt(value)} s > target {_fmt(target)} s (×{ratio:.2f})"
        elif ratio > policy.slo_scale_down_below and floor is None:
            floor = obs.replicas
            words = words or f"{label} {_fmt(value)} s is {ratio:.0%} of target {_fmt(target)} s: no scale-down"
    return up, floor, words
