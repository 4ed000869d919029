"""Engine telemetry math: interval figures from parsed vLLM or SGLang `/metrics` expositions.

Pure functions over text and plain data, with no Django models and no I/O. The scraper worker (which
fetches through the Kubernetes pod proxy), `manage.py engine_stats` (plain HTTP) and the tests all run
this same code; `promql.py` computes the same figures from a Prometheus server instead.

The pipeline is `exposition.parse_snapshot(text)` → `increments(prev, cur)` (per pod, counter resets handled) →
`merge_increments([...])` (per pool or service: bucket increments summed, never percentiles averaged)
→ `figures_from_increments(inc)`. `figures(prev, cur)` is the one-pod shortcut.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields

from apps.telemetry.exposition import ENGINES, VLLM, LabelKey, Snapshot

# vLLM finish reasons that mean the request did not succeed.
VLLM_FAILED_REASONS = frozenset({"abort", "error"})

# The keys `manage.py engine_stats --json` prints, in order.
ENGINE_STATS_KEYS = (
    "engine",
    "model",
    "ttft_p50_s",
    "ttft_p95_s",
    "ttft_p99_s",
    "itl_p50_s",
    "itl_p95_s",
    "kv_cache_usage",
    "running",
    "waiting",
    "prefix_cache_hit_rate",
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
)


# --- Quantiles ---------------------------------------------------------------------------------------


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """The q-quantile of cumulative bucket counts {upper bound: count}, as PromQL's histogram_quantile.

    Linear interpolation inside the bucket the rank falls in, 0 as the lower bound of a first bucket
    with a positive bound, the last finite bound when the rank falls in +Inf. None (PromQL's NaN) when
    there are no observations, no +Inf bucket or fewer than two buckets.
    """
    return histogram_quantiles((q,), buckets)[0]


def histogram_quantiles(qs: Iterable[float], buckets: Mapping[float, float]) -> list[float | None]:
    """`histogram_quantile` of each q, with the buckets sorted and repaired once."""
    cumulative = _cumulative(buckets)
    return [_quantile(q, cumulative) for q in qs]


def _cumulative(buckets: Mapping[float, float]) -> tuple[list[float], list[float]] | None:
    bounds = sorted(buckets)
    if len(bounds) < 2 or bounds[-1] != math.inf:
        return None
    # Cumulative counts must not decrease; scrapes racing with observations (or a partial reset) can
    # break that, and Prometheus repairs it the same way: carry the running maximum forward.
    counts: list[float] = []
    running = 0.0
    for bound in bounds:
        count = buckets[bound]
        running = running if running > count else count  # max(count, running), NaN included
        counts.append(running)
    return bounds, counts


def _quantile(q: float, cumulative: tuple[list[float], list[float]] | None) -> float | None:
    if math.isnan(q):
        return None
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    if cumulative is None:
        return None
    bounds, counts = cumulative
    observations = counts[-1]
    if observations <= 0:
        return None
    rank = q * observations
    last = len(bounds) - 1
    b = last
    for i in range(last):
        if counts[i] >= rank:
            b = i
            break
    if b == last:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start, end, in_bucket = 0.0, bounds[b], counts[b]
    if b > 0:
        start = bounds[b - 1]
        in_bucket -= counts[b - 1]
        rank -= counts[b - 1]
    if in_bucket <= 0:  # only when q == 0 and the first bucket is empty
        return start
    return start + (end - start) * (rank / in_bucket)


# --- Increments between two scrapes ------------------------------------------------------------------


@dataclass(frozen=True)
class Increments:
    """What happened in one interval, for one pod or merged over pods; the input to the figures.

    `histograms` are cumulative bucket increments summed over series; `counters` are per-series
    increments; gauges are the latest values summed over series, with the series count for means.
    """

    engine: str
    model: str | None
    interval_s: float
    histograms: Mapping[str, Mapping[float, float]]
    counters: Mapping[str, Mapping[LabelKey, float]]
    gauge_sums: Mapping[str, float]
    gauge_counts: Mapping[str, int]
    pods: int = 1
    # vLLM's CPU tier: its size and the bytes ever written to it (cumulative, summed over the engines): an LRU
    # that frees nothing until it is full, so their ratio is how full it is (vLLM exports no such gauge).
    tier_bytes: float | None = None
    tier_stored_bytes: float | None = None
    # Histograms' `_sum` increments summed over series (only where the engine exports them).
    histogram_sums: Mapping[str, float] = field(default_factory=dict)


def _restarted(prev: Snapshot, cur: Snapshot, name: str, key: LabelKey) -> bool:
    before, after = prev.created.get((name, key)), cur.created.get((name, key))
    return before is not None and after is not None and before != after


def _counter_increase(before: float | None, after: float, reset: bool) -> float:
    # Prometheus' rule: a counter that went down was reset, so all of its current value is new.
    # A series absent from the earlier scrape was created during the interval: all of it is new too.
    if before is None or reset or after < before:
        return after
    return after - before


def _histogram_new(before: Mapping[float, float] | None, after: Mapping[float, float], reset: bool) -> bool:
    """Whether all of a histogram series is new: absent before, restarted, or any bucket went down. Buckets of
    one series reset together when the engine restarts; checking them as a group catches a restart even when a
    busy new process has already passed the old count in some buckets."""
    return (before is None or reset or before.keys() != after.keys()
            or any(count < before[bound] for bound, count in after.items()))


def _histogram_increase(
    before: Mapping[float, float] | None, after: Mapping[float, float], reset: bool
) -> dict[float, float]:
    if _histogram_new(before, after, reset):
        return dict(after)
    return {bound: count - before[bound] for bound, count in after.items()}


def increments(prev: Snapshot, cur: Snapshot) -> Increments:
    """Increments of one engine between two of its scrapes, with counter resets handled."""
    if prev.engine != cur.engine:
        raise ValueError(f"engine changed between scrapes ({prev.engine} → {cur.engine})")
    interval = cur.scraped_at - prev.scraped_at
    if interval <= 0:
        raise ValueError("the second scrape must be later than the first")

    histograms: dict[str, dict[float, float]] = {}
    sums: dict[str, float] = {}
    for name, series in cur.histograms.items():
        summed: dict[float, float] = {}
        for key, buckets in series.items():
            before = prev.histograms.get(name, {}).get(key)
            reset = _restarted(prev, cur, name, key)
            for bound, inc in _histogram_increase(before, buckets, reset).items():
                summed[bound] = summed.get(bound, 0.0) + inc
            after_sum, before_sum = cur.sums.get(name, {}).get(key), prev.sums.get(name, {}).get(key)
            if after_sum is not None:  # the sum resets with the buckets
                new = before_sum is None or _histogram_new(before, buckets, reset)
                sums[name] = sums.get(name, 0.0) + (after_sum if new else after_sum - before_sum)
        histograms[name] = summed

    counters: dict[str, dict[LabelKey, float]] = {}
    for name, series in cur.counters.items():
        before = prev.counters.get(name, {})
        counters[name] = {
            key: _counter_increase(before.get(key), value, _restarted(prev, cur, name, key))
            for key, value in series.items()
        }

    tier_bytes, tier_stored = _vllm_tier_fill(cur) if cur.engine == VLLM else (None, None)
    return Increments(
        tier_bytes=tier_bytes,
        tier_stored_bytes=tier_stored,
        engine=cur.engine,
        model=cur.model or prev.model,
        interval_s=interval,
        histograms=histograms,
        counters=counters,
        gauge_sums={name: math.fsum(series.values()) for name, series in cur.gauges.items()},
        gauge_counts={name: len(series) for name, series in cur.gauges.items()},
        histogram_sums=sums,
    )


def _vllm_tier_fill(snap: Snapshot) -> tuple[float | None, float | None]:
    """(tier bytes, bytes written to it) of a vLLM scrape with a CPU tier: `--kv-offloading-size` GiB from
    `cache_config_info` and the OffloadingConnector's `kv_offload_store_bytes`; (None, None) without one."""
    stored = snap.counters.get("kv_offload_store_bytes")
    sizes = []
    for key in snap.gauges.get("cache_config_info", {}):
        try:
            sizes.append(float(dict(key).get("kv_offloading_size", "")) * 1024**3)
        except ValueError:
            continue
    if not stored or not sizes:
        return None, None
    return math.fsum(sizes), math.fsum(stored.values())


def _sum_known(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return math.fsum(known) if known else None


def merge_increments(items: Iterable[Increments]) -> Increments:
    """Merge pods' increments into one pool's or service's: bucket increments and counters summed.

    Quantiles of the merged histogram are those of all observations together, never an average of
    per-pod percentiles. Pods scraped over slightly different intervals are put on their mean interval
    (counters scaled), so tokens per second stay the sum of each pod's rate.
    """
    items = list(items)
    if not items:
        raise ValueError("nothing to merge")
    engines = {item.engine for item in items}
    if len(engines) > 1:
        raise ValueError(f"cannot merge different engines: {sorted(engines)}")
    interval = math.fsum(item.interval_s for item in items) / len(items)

    histograms: dict[str, dict[float, float]] = {}
    sums: dict[str, float] = {}
    counters: dict[str, dict[LabelKey, float]] = {}
    gauge_sums: dict[str, float] = {}
    gauge_counts: dict[str, int] = {}
    for item in items:
        for name, value in item.histogram_sums.items():
            sums[name] = sums.get(name, 0.0) + value
        for name, buckets in item.histograms.items():
            merged = histograms.setdefault(name, {})
            for bound, inc in buckets.items():
                merged[bound] = merged.get(bound, 0.0) + inc
        scale = interval / item.interval_s
        for name, series in item.counters.items():
            merged_series = counters.setdefault(name, {})
            for key, inc in series.items():
                merged_series[key] = merged_series.get(key, 0.0) + inc * scale
        for name, value in item.gauge_sums.items():
            gauge_sums[name] = gauge_sums.get(name, 0.0) + value
            gauge_counts[name] = gauge_counts.get(name, 0) + item.gauge_counts.get(name, 0)

    return Increments(
        engine=items[0].engine,
        model=next((item.model for item in items if item.model), None),
        interval_s=interval,
        histograms=histograms,
        counters=counters,
        gauge_sums=gauge_sums,
        gauge_counts=gauge_counts,
        pods=sum(item.pods for item in items),
        tier_bytes=_sum_known(item.tier_bytes for item in items),
        tier_stored_bytes=_sum_known(item.tier_stored_bytes for item in items),
        histogram_sums=sums,
    )


# --- Figures -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figures:
    """The derived figures of one interval for a pod, pool or service; None where there was no data."""

    engine: str
    model: str | None
    interval_s: float
    pods: int
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    ttft_p99_s: float | None
    itl_p50_s: float | None
    itl_p95_s: float | None
    kv_cache_usage: float | None
    running: float | None
    waiting: float | None
    prefix_cache_hit_rate: float | None
    prompt_tokens_per_s: float | None
    generation_tokens_per_s: float | None
    preemptions: float | None
    success_rate: float | None
    cpu_hit_rate: float | None = None  # share of prompt tokens loaded from the KV cache's CPU tier
    cpu_usage: float | None = None  # how full the CPU tier is, 0 to 1
    cpu_load_tokens_per_s: float | None = None  # tokens copied back from the CPU tier to the GPU
    # Speculative decoding: accepted drafted tokens over drafted tokens (vLLM's acceptance rate; None without).
    spec_acceptance_rate: float | None = None
    # What the autoscaler's signals read (`apps.autoscaling.signals`): the p95 of the time requests waited
    # before they were first scheduled, requests finished per second, the p95 of their prompts' lengths, and
    # the prompt tokens waiting: the requests waiting now × the mean prompt of those finished in the interval
    # (neither engine exports the waiting queue's tokens; 0 when nothing waits, None when unknown).
    queue_time_p95_s: float | None = None
    requests_per_s: float | None = None
    prompt_tokens_p95: float | None = None
    waiting_prompt_tokens: float | None = None

    def as_dict(self) -> dict:
        """Every figure, JSON-ready (all fields are scalars, so no deep copy: `asdict` was a tenth of a
        2,000-engine scrape cycle)."""
        return {name: getattr(self, name) for name in _FIGURE_FIELDS}

    def engine_stats(self) -> dict:
        """Exactly the keys of `manage.py engine_stats --json`."""
        data = self.as_dict()
        return {key: data[key] for key in ENGINE_STATS_KEYS}


def _counter_sum(inc: Increments, name: str) -> float | None:
    """Sum of a counter family's increments over its series; None if the engine does not export it."""
    series = inc.counters.get(name)
    return None if series is None else math.fsum(series.values())


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return min(max(numerator / denominator, 0.0), 1.0)


def _per_second(inc: Increments, name: str) -> float | None:
    total = _counter_sum(inc, name)
    return None if total is None else total / inc.interval_s


def prefix_cache_hit_rate(inc: Increments) -> float | None:
    """Share of prompt tokens served from the prefix cache during the interval."""
    if inc.engine == VLLM:
        return _ratio(_counter_sum(inc, "prefix_cache_hits"), _counter_sum(inc, "prefix_cache_queries"))
    # SGLang's windowed formula: the *_hit modes of prefill_effective_tokens over all of its modes.
    series = inc.counters.get("prefill_effective_tokens")
    if series is None:
        return None
    hits = math.fsum(v for k, v in series.items() if dict(k).get("mode", "").endswith("_hit"))
    return _ratio(hits, math.fsum(series.values()))


def cpu_tier_figures(inc: Increments) -> dict[str, float | None]:
    """The CPU tier's hit rate, fill and load rate; all None for an engine without one.

    vLLM: hits through the KV connector over its queries (every prompt token), the tokens those hits loaded,
    and the bytes written over the tier's size. SGLang (HiCache): the `host_hit` mode of the prefill's
    effective tokens over all modes, `load_back_tokens`, and the host pool's used over total tokens.
    """
    if inc.engine == VLLM:
        queries = _counter_sum(inc, "external_prefix_cache_queries")
        hits = _counter_sum(inc, "external_prefix_cache_hits")
        if inc.tier_bytes is None and not hits:
            return dict.fromkeys(("cpu_hit_rate", "cpu_usage", "cpu_load_tokens_per_s"))
        return {"cpu_hit_rate": _ratio(hits, queries), "cpu_usage": _ratio(inc.tier_stored_bytes, inc.tier_bytes),
                "cpu_load_tokens_per_s": None if hits is None else hits / inc.interval_s}
    total = inc.gauge_sums.get("hicache_host_total_tokens")
    if total is None:
        return dict.fromkeys(("cpu_hit_rate", "cpu_usage", "cpu_load_tokens_per_s"))
    series = inc.counters.get("prefill_effective_tokens") or {}
    host = math.fsum(v for k, v in series.items() if dict(k).get("mode") == "host_hit")
    return {"cpu_hit_rate": _ratio(host, math.fsum(series.values())),
            "cpu_usage": _ratio(inc.gauge_sums.get("hicache_host_used_tokens"), total),
            "cpu_load_tokens_per_s": _per_second(inc, "load_back_tokens")}


def success_rate(inc: Increments) -> float | None:
    """Share of requests finished in the interval that did not abort or fail."""
    if inc.engine == VLLM:
        series = inc.counters.get("request_success")
        if series is None:
            return None
        ok = math.fsum(v for k, v in series.items() if dict(k).get("finished_reason") not in VLLM_FAILED_REASONS)
        return _ratio(ok, math.fsum(series.values()))
    total = _counter_sum(inc, "num_requests")
    aborted = _counter_sum(inc, "num_aborted_requests") or 0.0
    return None if not total else _ratio(total - aborted, total)


def queue_figures(inc: Increments) -> dict[str, float | None]:
    """Queue time p95, requests finished per second, prompt length p95 and prompt tokens waiting."""
    names = ENGINES[inc.engine]
    queue = inc.histograms.get(names.queue_time)
    prompts = inc.histograms.get(names.request_prompt_tokens)
    count = prompts.get(math.inf) if prompts else None
    total = inc.histogram_sums.get(names.request_prompt_tokens)
    mean = total / count if count and total is not None else None
    waiting = inc.gauge_sums.get(names.waiting)
    finished = _counter_sum(inc, names.finished)
    return {"queue_time_p95_s": histogram_quantile(0.95, queue) if queue else None,
            "requests_per_s": None if finished is None else finished / inc.interval_s,
            "prompt_tokens_p95": histogram_quantile(0.95, prompts) if prompts else None,
            "waiting_prompt_tokens": None if waiting is None else 0.0 if waiting == 0 else
            None if mean is None else waiting * mean}


def figures_from_increments(inc: Increments) -> Figures:
    """Compute the figures of an interval from (possibly merged) increments."""
    names = ENGINES[inc.engine]

    def quantiles(family: str, *qs: float) -> list[float | None]:
        buckets = inc.histograms.get(family)
        return [None] * len(qs) if buckets is None else histogram_quantiles(qs, buckets)

    def gauge_sum(family: str) -> float | None:
        return inc.gauge_sums.get(family)

    def gauge_mean(family: str) -> float | None:
        count = inc.gauge_counts.get(family)
        return inc.gauge_sums[family] / count if count else None

    ttft_p50, ttft_p95, ttft_p99 = quantiles(names.ttft, 0.50, 0.95, 0.99)
    itl_p50, itl_p95 = quantiles(names.itl, 0.50, 0.95)
    values = dict(
        ttft_p50_s=ttft_p50,
        ttft_p95_s=ttft_p95,
        ttft_p99_s=ttft_p99,
        itl_p50_s=itl_p50,
        itl_p95_s=itl_p95,
        kv_cache_usage=gauge_mean(names.kv_usage),
        running=gauge_sum(names.running),
        waiting=gauge_sum(names.waiting),
        prefix_cache_hit_rate=prefix_cache_hit_rate(inc),
        prompt_tokens_per_s=_per_second(inc, names.prompt_tokens),
        generation_tokens_per_s=_per_second(inc, names.generation_tokens),
        preemptions=_counter_sum(inc, names.preemptions) if names.preemptions else None,
        success_rate=success_rate(inc),
        **cpu_tier_figures(inc),
        **queue_figures(inc),
        spec_acceptance_rate=_ratio(_counter_sum(inc, "spec_decode_num_accepted_tokens"),
                                    _counter_sum(inc, "spec_decode_num_draft_tokens")),
    )
    return Figures(
        engine=inc.engine,
        model=inc.model,
        interval_s=inc.interval_s,
        pods=inc.pods,
        # An exposition may carry NaN or ±Inf samples; they are no figure (and not valid JSON).
        **{key: value if value is None or math.isfinite(value) else None for key, value in values.items()},
    )


@dataclass(frozen=True)
class RequestMix:
    """The requests an interval finished and their lengths: cumulative bucket increments {upper bound: count}
    of the per-request prompt and output token histograms (what the what-if lab rebuilds a load from)."""

    interval_s: float
    requests: float
    prompt_buckets: Mapping[float, float]
    output_buckets: Mapping[float, float]


def request_mix(inc: Increments) -> RequestMix | None:
    """The interval's request count and length histograms; None when the engine does not export them or the
    interval finished no request."""
    names = ENGINES[inc.engine]
    prompt = inc.histograms.get(names.request_prompt_tokens)
    output = inc.histograms.get(names.request_generation_tokens)
    if not prompt or not output or math.inf not in prompt or not prompt[math.inf] > 0:
        return None
    return RequestMix(inc.interval_s, prompt[math.inf], dict(prompt), dict(output))


def figures(prev: Snapshot, cur: Snapshot) -> Figures:
    """The figures of one engine for the interval between two of its scrapes."""
    return figures_from_increments(increments(prev, cur))


_FIGURE_FIELDS = tuple(f.name for f in fields(Figures))
