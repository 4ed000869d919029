"""Canary analysis: one analysis window's judgement of a canary revision against the stable one.

Pure (standard library only, no Django, no database), so the rollout machinery, the benchmark on recorded
samples (`bench/rollout.py`) and the tests all call the same arithmetic. Both revisions' samples come from
the same window on the same clock; the caller gathers them.

The judgement, as an SRE would make it:
- a crash-looping or never-ready canary fails at once, whatever its samples;
- fewer than `min_requests` requests on either side is *inconclusive*;
- TTFT p95 is compared per bucket of tokens to prefill (prompt tokens minus prefix-cache hits) and, where each
  request's load is known, of the requests ahead of it on its pod (sent there before it and still waiting for
  their first token when it arrived), and the buckets are combined with the stable revision's weights, so a
  canary that got longer prompts or a colder cache is not judged slower, and a canary whose one pod gets 5 % of
  the requests is not judged faster than stable pods where requests wait behind others (a 2× slower canary
  measured only ×1.5 against all of stable's requests: stable's p95 held the requests that waited behind a long
  prefill on their pod). When the buckets that can be compared by load hold less than half of the canary's
  requests (a slower canary keeps more requests waiting, so its requests meet more ahead than stable's), TTFT is
  compared by prompt length alone. The prefix-cache hit rate is reported beside it;
- ITL p95 (of each request's mean inter-token latency), the error rate (5xx and engine aborts) and
  preemptions per request are compared as they are;
- each metric's allowance is stable × (1 + tolerance) (error and preemption rates also get an absolute
  slack, as a rate of 0 allows nothing), capped by the service's SLO where it has one;
- a metric passes when the canary's value is within its allowance, and fails only when even the lower
  bound of its one-sided confidence interval (`confidence`, 99 % by default) is above it; in between the
  window cannot tell yet, and the verdict is *inconclusive* (the step extends its window and judges the
  samples so far plus the next window's). Without that, a p95 over a 5 % canary's hundred requests is so
  noisy that identical revisions would be rolled back about one time in five.

p95 is the nearest-rank percentile: the value at rank ⌈0.95·n⌉ of the n sorted values. Its lower confidence
bound is the value at rank ⌊0.95·n − z·√(n·0.95·0.05)⌋ (at least 1; the normal approximation of the binomial
order-statistic interval), and a rate's is (k − z·√k) / n for k events in n requests (Poisson, at least 0).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from statistics import NormalDist


class Verdict(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"


class Action(StrEnum):
    ADVANCE = "advance"
    EXTEND = "extend"  # hold the step and lengthen its window
    HOLD = "hold"  # stay at this step until a person acts
    PROMOTE = "promote"
    ROLL_BACK = "roll_back"


@dataclass(frozen=True)
class Sample:
    """One finished (or failed) request. `ttft_s` and `itl_s` are None when there was no token (an error)."""

    prompt_tokens: int
    ttft_s: float | None
    itl_s: float | None = None
    cached_tokens: int = 0
    error: bool = False
    preemptions: int = 0
    # Requests ahead of this one on its pod: sent there before it and still waiting for their first token when it
    # arrived (`requests_ahead`); None when unknown (the engines' histograms), and then TTFT is compared over every
    # load.
    ahead: int | None = None

    @property
    def prefill_tokens(self) -> int:
        return max(self.prompt_tokens - self.cached_tokens, 0)


@dataclass(frozen=True)
class Readiness:
    """What the cluster says about the canary's pods during the window."""

    crash_looping: bool = False
    never_ready: bool = False
    detail: str = ""  # which pod, and what the cluster says of it


@dataclass(frozen=True)
class Thresholds:
    """How a window is judged. Bucket bounds are in tokens to prefill: (250, 1000, 4000) makes
    <250, 250–1k, 1k–4k and ≥4k."""

    tolerance: float = 0.2
    min_requests: int = 100
    min_bucket_requests: int = 10
    buckets: tuple[int, ...] = (250, 1000, 4000)
    # Bounds of requests ahead of a request on its pod: (1, 2, 4, 8, 16) makes 0, 1, 2–3, 4–7, 8–15, ≥16.
    load_buckets: tuple[int, ...] = (1, 2, 4, 8, 16)
    ttft_p95_slo_s: float | None = None
    itl_p95_slo_s: float | None = None
    max_error_rate: float | None = None
    error_rate_slack: float = 0.01
    preemption_slack: float = 0.05
    confidence: float = 0.99

    @property
    def z(self) -> float:
        return NormalDist().inv_cdf(self.confidence)


@dataclass(frozen=True)
class Metric:
    """One metric for both revisions, the largest canary value allowed, the lower confidence bound of the
    canary's value, and the outcome (pass, fail, or inconclusive while the bound is within the allowance)."""

    name: str
    canary: float
    stable: float
    allowed: float
    canary_lower: float
    outcome: Verdict
    reason: str = ""
    detail: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.outcome == Verdict.PASS


@dataclass(frozen=True)
class Analysis:
    verdict: Verdict
    reason: str
    canary_requests: int
    stable_requests: int
    metrics: tuple[Metric, ...] = ()

    def as_dict(self) -> dict:
        return {
            "verdict": str(self.verdict), "reason": self.reason,
            "canary_requests": self.canary_requests, "stable_requests": self.stable_requests,
            "metrics": [{"name": m.name, "canary": m.canary, "stable": m.stable, "allowed": m.allowed,
                         "canary_lower": m.canary_lower, "outcome": str(m.outcome), "reason": m.reason,
                         **m.detail} for m in self.metrics],
        }


def p95(values: Sequence[float]) -> float:
    """Nearest-rank 95th percentile (the value at rank ⌈0.95·n⌉, 1-based) of a non-empty sequence."""
    ordered = sorted(values)
    return ordered[math.ceil(0.95 * len(ordered)) - 1]


def p95_lower(values: Sequence[float], z: float) -> float:
    """The lower bound of p95's one-sided confidence interval: the value at rank ⌊0.95·n − z·√(n·0.95·0.05)⌋."""
    ordered = sorted(values)
    n = len(ordered)
    rank = math.floor(0.95 * n - z * math.sqrt(n * 0.95 * 0.05))
    return ordered[max(rank, 1) - 1]


def rate_lower(events: float, requests: int, z: float) -> float:
    """The lower bound of a rate's one-sided confidence interval, (k − z·√k) / n, at least 0."""
    return max(events - z * math.sqrt(events), 0.0) / requests


def bucket_label(index: int, bounds: Sequence[int]) -> str:
    """`<250`, `250–1k`, `1k–4k`, `≥4k` for bounds (250, 1000, 4000)."""
    def tokens(n: int) -> str:
        return f"{n // 1000}k" if n % 1000 == 0 else str(n)
    if not bounds:
        return "all"
    if index == 0:
        return f"<{tokens(bounds[0])}"
    if index == len(bounds):
        return f"≥{tokens(bounds[-1])}"
    return f"{tokens(bounds[index - 1])}–{tokens(bounds[index])}"


def load_label(index: int, bounds: Sequence[int]) -> str:
    """`0 ahead`, `1 ahead`, `2–3 ahead`, `≥16 ahead` for bounds (1, 2, 4, 8, 16)."""
    low = 0 if index == 0 else bounds[index - 1]
    if index == len(bounds):
        return f"≥{low} ahead"
    high = bounds[index] - 1
    return f"{low} ahead" if high == low else f"{low}–{high} ahead"


def requests_ahead(spans: Sequence[tuple[str, float, float]]) -> list[int]:
    """For each request (pod, sent, first token or end if none), how many requests of the same pod were sent
    before it and had not got their first token when it was sent: the prefills and queue it waits behind."""
    order = sorted(range(len(spans)), key=lambda i: (spans[i][0], spans[i][1]))
    counts = [0] * len(spans)
    ends: list[float] = []
    pod = None
    for i in order:
        name, start, end = spans[i]
        if name != pod:
            pod, ends = name, []
        while ends and ends[0] <= start:
            heapq.heappop(ends)
        counts[i] = len(ends)
        heapq.heappush(ends, end)
    return counts


def seconds(value: float) -> str:
    return f"{value:.2f} s" if value >= 0.1 else f"{value * 1000:.0f} ms"


def analyse(canary: Sequence[Sample], stable: Sequence[Sample], readiness: Readiness = Readiness(),
            thresholds: Thresholds = Thresholds()) -> Analysis:
    """Judge one window: pass, fail or inconclusive, every metric for both revisions, and why in words."""
    counts = {"canary_requests": len(canary), "stable_requests": len(stable)}
    if readiness.crash_looping or readiness.never_ready:
        state = "is crash-looping" if readiness.crash_looping else "never became ready"
        detail = f" ({readiness.detail})" if readiness.detail else ""
        return Analysis(Verdict.FAIL, f"the canary {state}{detail}", **counts)
    short = [f"{len(samples)} {side} requests" for side, samples in (("canary", canary), ("stable", stable))
             if len(samples) < thresholds.min_requests]
    if short:
        return Analysis(Verdict.INCONCLUSIVE, f"only {' and '.join(short)} in the window; "
                        f"at least {thresholds.min_requests} needed on each side", **counts)
    ttft = ttft_metric(canary, stable, thresholds)
    others = (itl_metric(canary, stable, thresholds), *rate_metrics(canary, stable, thresholds))
    metrics = others if ttft is None else (ttft, *others)
    failed = [m.reason for m in metrics if m.outcome == Verdict.FAIL]
    if failed:
        return Analysis(Verdict.FAIL, "; ".join(failed), metrics=metrics, **counts)
    # Without TTFT (no bucket with enough successful requests on both sides) the window cannot pass.
    unsure = [m.reason for m in metrics if m.outcome == Verdict.INCONCLUSIVE]
    if ttft is None:
        unsure.insert(0, f"no bucket of prompt length and load has {thresholds.min_bucket_requests} successful "
                         "requests on both sides")
    if unsure:
        return Analysis(Verdict.INCONCLUSIVE, "; ".join(unsure), metrics=metrics, **counts)
    return Analysis(Verdict.PASS, f"all {len(metrics)} metrics within bounds over {len(canary)} canary and "
                    f"{len(stable)} stable requests", metrics=metrics, **counts)


def _bucket_of(tokens: int, bounds: Sequence[int]) -> int:
    return sum(1 for bound in bounds if tokens >= bound)


def _ttft_rows(canary: Sequence[Sample], stable: Sequence[Sample], thresholds: Thresholds,
               loads: Sequence[int]) -> list[dict]:
    """Each comparable bucket's p95 on both sides and stable's share (see ttft_metric); no load buckets when
    `loads` is empty or a request's load is unknown."""
    bounds = thresholds.buckets
    sides: list[dict[tuple[int, int | None], list[float]]] = []
    for samples in (canary, stable):
        per_bucket: dict[tuple[int, int | None], list[float]] = {}
        for sample in samples:
            if sample.ttft_s is not None:
                load = None if sample.ahead is None or not loads else _bucket_of(sample.ahead, loads)
                per_bucket.setdefault((_bucket_of(sample.prefill_tokens, bounds), load), []).append(sample.ttft_s)
        sides.append(per_bucket)
    compared = sorted((key for key in sides[0].keys() & sides[1].keys()
                       if min(len(sides[0][key]), len(sides[1][key])) >= thresholds.min_bucket_requests),
                      key=lambda key: (key[0], -1 if key[1] is None else key[1]))
    weight_total = sum(len(sides[1][key]) for key in compared)
    return [{"bucket": bucket_label(b, bounds), "ahead": None if load is None else load_label(load, loads),
             "weight": len(sides[1][(b, load)]) / weight_total,
             "canary": p95(sides[0][(b, load)]), "stable": p95(sides[1][(b, load)]),
             "canary_lower": p95_lower(sides[0][(b, load)], thresholds.z),
             "canary_requests": len(sides[0][(b, load)]), "stable_requests": len(sides[1][(b, load)])}
            for b, load in compared]


def ttft_metric(canary: Sequence[Sample], stable: Sequence[Sample], thresholds: Thresholds) -> Metric | None:
    """TTFT p95 under stable's mix: Σ over buckets (of tokens to prefill and, where known, of requests ahead on the
    pod) of stable's share × each side's bucket p95, over the buckets with enough successful requests on both sides
    (shares renormalised); by prompt length alone when the load's buckets leave out half of the canary's requests.
    None when no bucket has enough."""
    rows = _ttft_rows(canary, stable, thresholds, thresholds.load_buckets)
    answered = sum(1 for sample in canary if sample.ttft_s is not None)
    if thresholds.load_buckets and sum(r["canary_requests"] for r in rows) * 2 < answered:
        rows = _ttft_rows(canary, stable, thresholds, ())
    if not rows:
        return None
    canary_value = sum(r["weight"] * r["canary"] for r in rows)
    canary_lower = sum(r["weight"] * r["canary_lower"] for r in rows)
    stable_value = sum(r["weight"] * r["stable"] for r in rows)
    worst = max(rows, key=lambda r: r["canary"] / r["stable"] if r["stable"] else math.inf)
    place = f"the {worst['bucket']} prompt bucket" if thresholds.buckets else ""
    if worst["ahead"]:
        place = f"{place or 'requests'} with {worst['ahead']} on their pod"
    if len(rows) > 1:
        where = f" (worst in {place}: {seconds(worst['canary'])} vs {seconds(worst['stable'])})"
    else:
        where = f" in {place}" if place else ""
    metric = _compare("TTFT p95", canary_value, canary_lower, stable_value, thresholds.tolerance, 0.0,
                      thresholds.ttft_p95_slo_s, seconds, where)
    detail = {"buckets": rows, "cache_hit_rate": {"canary": cache_hit_rate(canary), "stable": cache_hit_rate(stable)}}
    return replace(metric, detail=detail)


def itl_metric(canary: Sequence[Sample], stable: Sequence[Sample], thresholds: Thresholds) -> Metric:
    values = [[s.itl_s for s in samples if s.itl_s is not None] for samples in (canary, stable)]
    canary_value, stable_value = (p95(v) if v else 0.0 for v in values)
    canary_lower = p95_lower(values[0], thresholds.z) if values[0] else 0.0
    return _compare("ITL p95", canary_value, canary_lower, stable_value, thresholds.tolerance, 0.0,
                    thresholds.itl_p95_slo_s, seconds)


def rate_metrics(canary: Sequence[Sample], stable: Sequence[Sample], thresholds: Thresholds) -> list[Metric]:
    def rates(count) -> tuple[float, float, float]:
        """(canary, its lower bound, stable)."""
        canary_events = sum(count(s) for s in canary)
        return (canary_events / len(canary), rate_lower(canary_events, len(canary), thresholds.z),
                sum(count(s) for s in stable) / len(stable))

    def percent(value: float) -> str:
        return f"{value * 100:.1f} %"

    def per_request(value: float) -> str:
        return f"{value:.2f} per request"

    errors = rates(lambda s: s.error)
    preempted = rates(lambda s: s.preemptions)
    return [
        _compare("error rate", *errors, thresholds.tolerance, thresholds.error_rate_slack,
                 thresholds.max_error_rate, percent),
        _compare("preemptions", *preempted, thresholds.tolerance, thresholds.preemption_slack, None, per_request),
    ]


def cache_hit_rate(samples: Sequence[Sample]) -> float:
    """Prompt tokens served from the prefix cache, as a share of all prompt tokens."""
    prompt = sum(s.prompt_tokens for s in samples)
    return sum(min(s.cached_tokens, s.prompt_tokens) for s in samples) / prompt if prompt else 0.0


def _compare(name: str, canary: float, canary_lower: float, stable: float, tolerance: float, slack: float,
             slo: float | None, show, where: str = "") -> Metric:
    """Allowed: stable × (1 + tolerance) + slack, capped by the SLO where there is one. Pass within it, fail
    when even the canary's lower bound is above it, inconclusive in between."""
    relative = stable * (1 + tolerance) + slack
    allowed = relative if slo is None else min(relative, slo)
    if canary <= allowed:
        return Metric(name, canary, stable, allowed, canary_lower, Verdict.PASS)
    outcome = Verdict.FAIL if canary_lower > allowed else Verdict.INCONCLUSIVE
    reasons = []
    if canary > relative:
        if slack:
            reasons.append(f"{name} {show(canary)} vs stable {show(stable)} > {show(relative)} allowed")
        else:
            ratio = f"×{canary / stable:.2f}" if stable else "stable 0"
            reasons.append(f"{name} {show(canary)} vs stable {show(stable)} ({ratio}) > ×{1 + tolerance:.2f} allowed")
    if slo is not None and canary > slo:
        reasons.append(f"{name} {show(canary)} above the service's objective of {show(slo)}"
                       + ("" if reasons else f" (stable {show(stable)})"))
    reason = "; ".join(reasons) + where
    if outcome == Verdict.INCONCLUSIVE:
        reason += f"; not sure yet: its lower confidence bound {show(canary_lower)} is within {show(allowed)}"
    return Metric(name, canary, stable, allowed, canary_lower, outcome, reason)


@dataclass(frozen=True)
class StepState:
    """Where a rollout stands when a window's verdict arrives."""

    last_step: bool
    inconclusive_count: int = 0  # inconclusive windows already seen at this step
    max_extensions: int = 2
    # HOLD or ROLL_BACK once extensions run out; hold by default, as too little traffic is no evidence against it
    when_exhausted: Action = Action.HOLD


def decide(verdict: Verdict, state: StepState) -> Action:
    """The action after a window: roll back on fail, advance (promote at the last step) on pass, and on an
    inconclusive window extend it up to `max_extensions` times, then follow `when_exhausted`."""
    if verdict == Verdict.FAIL:
        return Action.ROLL_BACK
    if verdict == Verdict.PASS:
        return Action.PROMOTE if state.last_step else Action.ADVANCE
    if state.inconclusive_count < state.max_extensions:
        return Action.EXTEND
    return state.when_exhausted
