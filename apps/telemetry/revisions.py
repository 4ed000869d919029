"""Each revision's engine histograms during a canary rollout: what the scraper keeps per interval
(`RevisionIncrement`, from the merged increments of the revision's pods) and their sum over an analysis window.

The rollout controller (apps/rollouts/controller.py) judges a window on the requests the gateway metered, one row per
request; a service nobody calls through the gateway has none, and then the window is judged on these sums instead
(apps/rollouts/engine_samples.py turns them into samples).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

from apps.telemetry.exposition import ENGINES, VLLM
from apps.telemetry.figures import VLLM_FAILED_REASONS, Increments, prefix_cache_hit_rate
from apps.telemetry.models import RevisionIncrement


def _stored(buckets) -> list:
    return [["+Inf" if bound == math.inf else bound, count] for bound, count in sorted((buckets or {}).items())]


def _read(stored) -> dict[float, float]:
    return {math.inf if bound == "+Inf" else float(bound): float(count) for bound, count in stored}


def _counter(inc: Increments, name: str | None) -> float | None:
    series = inc.counters.get(name) if name else None
    return None if series is None else math.fsum(series.values())


def finished_and_failed(inc: Increments) -> tuple[float, float]:
    """Requests the interval finished, and of them those aborted or failed in the engine."""
    if inc.engine == VLLM:
        series = inc.counters.get("request_success") or {}
        failed = math.fsum(v for k, v in series.items() if dict(k).get("finished_reason") in VLLM_FAILED_REASONS)
        return math.fsum(series.values()), failed
    return _counter(inc, "num_requests") or 0.0, _counter(inc, "num_aborted_requests") or 0.0


def increment_fields(inc: Increments) -> dict:
    """The RevisionIncrement fields of one revision's merged increments."""
    names = ENGINES[inc.engine]
    finished, failed = finished_and_failed(inc)
    prompt = _counter(inc, names.prompt_tokens) or 0.0
    return {"ttft_buckets": _stored(inc.histograms.get(names.ttft)),
            "itl_buckets": _stored(inc.histograms.get(names.itl)),
            "prompt_buckets": _stored(inc.histograms.get(names.request_prompt_tokens)),
            "finished": finished, "failed": failed, "preemptions": _counter(inc, names.preemptions),
            "prompt_tokens": prompt, "cached_tokens": prompt * (prefix_cache_hit_rate(inc) or 0.0)}


@dataclass
class EngineWindow:
    """One revision's engine histograms summed over a window (bucket increments cumulative per bound)."""

    ttft_buckets: dict[float, float] = field(default_factory=dict)
    itl_buckets: dict[float, float] = field(default_factory=dict)
    prompt_buckets: dict[float, float] = field(default_factory=dict)  # requests' prompt lengths, in tokens
    finished: float = 0.0
    failed: float = 0.0
    preemptions: float = 0.0
    prompt_tokens: float = 0.0
    cached_tokens: float = 0.0
    intervals: int = 0


def engine_window(service_id: int, role: str, start: datetime, end: datetime) -> EngineWindow:
    """The revision's (`role`) intervals scraped from `start` to `end`, summed."""
    out = EngineWindow()
    rows = RevisionIncrement.objects.filter(service_id=service_id, role=role, time__gte=start, time__lt=end)
    for row in rows.iterator():
        for mine, stored in ((out.ttft_buckets, row.ttft_buckets), (out.itl_buckets, row.itl_buckets),
                             (out.prompt_buckets, row.prompt_buckets)):
            for bound, count in _read(stored).items():
                mine[bound] = mine.get(bound, 0.0) + count
        out.finished += row.finished
        out.failed += row.failed
        out.preemptions += row.preemptions or 0.0
        out.prompt_tokens += row.prompt_tokens
        out.cached_tokens += row.cached_tokens
        out.intervals += 1
    return out
