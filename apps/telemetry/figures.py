"""Engine telemetry math: parse a vLLM or SGLang `/metrics` exposition and derive interval figures.

Pure functions over text and plain data, with no Django models and no I/O. The scraper worker (which
fetches through the Kubernetes pod proxy), `manage.py engine_stats` (plain HTTP) and the tests all run
this same code; `promql.py` computes the same figures from a Prometheus server instead.

The pipeline is `parse_snapshot(text)` → `increments(prev, cur)` (per pod, counter resets handled) →
`merge_increments([...])` (per pool or service: bucket increments summed, never percentiles averaged)
→ `figures_from_increments(inc)`. `figures(prev, cur)` is the one-pod shortcut.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

from prometheus_client.parser import text_string_to_metric_families

LabelKey = tuple[tuple[str, str], ...]
"""A series' labels as sorted (name, value) pairs (without `le` for histogram buckets)."""

VLLM = "vllm"
SGLANG = "sglang"


class NotAnEngineExposition(ValueError):
    """The text is not a Prometheus exposition of a vLLM or SGLang engine."""


@dataclass(frozen=True)
class EngineMetricNames:
    """Where each figure lives in one engine's exposition (family names without the prefix)."""

    prefix: str
    kv_usage: str
    running: str
    waiting: str
    preemptions: str | None
    ttft: str = "time_to_first_token_seconds"
    itl: str = "inter_token_latency_seconds"
    prompt_tokens: str = "prompt_tokens"
    generation_tokens: str = "generation_tokens"


ENGINES: dict[str, EngineMetricNames] = {
    VLLM: EngineMetricNames(
        prefix="vllm:",
        kv_usage="kv_cache_usage_perc",
        running="num_requests_running",
        waiting="num_requests_waiting",
        preemptions="num_preemptions",
    ),
    # SGLang has no preemption (retraction) counter in its exposition.
    SGLANG: EngineMetricNames(
        prefix="sglang:",
        kv_usage="token_usage",
        running="num_running_reqs",
        waiting="num_queue_reqs",
        preemptions=None,
    ),
}

# vLLM finish reasons that mean the request did not succeed.
VLLM_FAILED_REASONS = frozenset({"abort", "error"})

# Counter families the engine-specific ratios read (prefix-cache hit rate, success rate).
EXTRA_FAMILIES: dict[str, tuple[str, ...]] = {
    VLLM: ("prefix_cache_hits", "prefix_cache_queries", "request_success"),
    SGLANG: ("prefill_effective_tokens", "num_requests", "num_aborted_requests"),
}
_SAMPLE_SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")

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


# --- Parsing -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """One scrape of one engine: its kind, model and every engine series, keyed by family name.

    Family names have the engine prefix and the `_total` suffix removed (`prompt_tokens`); histograms
    map each series to its cumulative bucket counts by upper bound (`math.inf` for `+Inf`). `created`
    holds the `_created` timestamps of counters and histograms, which change when the engine restarts.
    """

    engine: str
    model: str | None
    scraped_at: float
    histograms: Mapping[str, Mapping[LabelKey, Mapping[float, float]]]
    counters: Mapping[str, Mapping[LabelKey, float]]
    gauges: Mapping[str, Mapping[LabelKey, float]]
    created: Mapping[tuple[str, LabelKey], float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """A JSON-ready form, so a worker can keep the previous scrape of a pod between runs."""

        def series(family_map, encode=lambda v: v):
            return {name: [[dict(key), encode(v)] for key, v in by_key.items()] for name, by_key in family_map.items()}

        return {
            "engine": self.engine,
            "model": self.model,
            "scraped_at": self.scraped_at,
            "histograms": series(self.histograms, lambda b: [[_bound_text(ub), n] for ub, n in b.items()]),
            "counters": series(self.counters),
            "gauges": series(self.gauges),
            "created": [[name, dict(key), ts] for (name, key), ts in self.created.items()],
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> Snapshot:
        """The Snapshot `to_dict` described."""

        def series(family_map, decode=lambda v: v):
            return {name: {_label_key(labels): decode(v) for labels, v in items} for name, items in family_map.items()}

        return cls(
            engine=data["engine"],
            model=data["model"],
            scraped_at=data["scraped_at"],
            histograms=series(data["histograms"], lambda b: {float(ub): n for ub, n in b}),
            counters=series(data["counters"]),
            gauges=series(data["gauges"]),
            created={(name, _label_key(labels)): ts for name, labels, ts in data["created"]},
        )


def _bound_text(bound: float) -> str:
    return "+Inf" if bound == math.inf else repr(bound)


def _label_key(labels: Mapping[str, str], drop: str | None = None) -> LabelKey:
    return tuple(sorted((k, v) for k, v in labels.items() if k != drop))


def detect_engine(text: str) -> str | None:
    """The engine whose prefix starts the most lines of the exposition, or None when neither does."""
    counts = {kind: text.count("\n" + names.prefix) + text.startswith(names.prefix) for kind, names in ENGINES.items()}
    kind, best = max(counts.items(), key=lambda item: item[1])
    return kind if best else None


def figure_families(engine: str) -> frozenset[str]:
    """The families (without prefix or suffix) the figures of `engine` are computed from."""
    names = ENGINES[engine]
    wanted = {names.ttft, names.itl, names.kv_usage, names.running, names.waiting}
    wanted |= {names.prompt_tokens, names.generation_tokens, *EXTRA_FAMILIES[engine]}
    if names.preemptions:
        wanted.add(names.preemptions)
    return frozenset(wanted)


def _family_of(metric: str) -> str:
    for suffix in _SAMPLE_SUFFIXES:
        if metric.endswith(suffix):
            return metric[: -len(suffix)]
    return metric


def _select_lines(text: str, prefix: str, wanted: frozenset[str]) -> str:
    # A vLLM exposition has ~700 lines and the figures need a tenth of them; dropping the rest before
    # the (pure-Python) parser cuts the scraper's CPU per engine several times over.
    keep = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(None, 3)
            metric = parts[2] if len(parts) > 2 else ""
        else:
            metric = line.split("{", 1)[0].split(" ", 1)[0]
        if metric.startswith(prefix) and _family_of(metric[len(prefix) :]) in wanted:
            keep.append(line)
    return "\n".join(keep) + "\n"


def parse_snapshot(text: str, scraped_at: float | None = None, *, all_families: bool = False) -> Snapshot:
    """Parse a Prometheus text exposition of a vLLM or SGLang engine into a Snapshot.

    Only the families the figures use are kept unless `all_families` is set. Raises
    NotAnEngineExposition when the text carries no engine metrics or does not parse.
    """
    engine = detect_engine(text)
    if engine is None:
        raise NotAnEngineExposition("no vllm: or sglang: metrics in the exposition")
    prefix = ENGINES[engine].prefix
    if not all_families:
        text = _select_lines(text, prefix, figure_families(engine))
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as exc:
        raise NotAnEngineExposition(f"not a Prometheus text exposition: {exc}") from exc

    histograms: dict[str, dict[LabelKey, dict[float, float]]] = {}
    counters: dict[str, dict[LabelKey, float]] = {}
    gauges: dict[str, dict[LabelKey, float]] = {}
    created_gauges: dict[tuple[str, LabelKey], float] = {}
    model: str | None = None

    for family in families:
        if not family.name.startswith(prefix):
            continue
        name = family.name[len(prefix) :]
        # A labelled family with no series yet (SGLang creates them on the first request) is still
        # exported: an idle engine then shows 0 tokens/s rather than no figure.
        if family.type == "counter":
            counters.setdefault(name, {})
        elif family.type == "histogram":
            histograms.setdefault(name, {})
        for sample in family.samples:
            if model is None and sample.labels.get("model_name"):
                model = sample.labels["model_name"]
            sample_name = sample.name[len(prefix) :]
            if family.type == "histogram":
                if sample_name == f"{name}_bucket":
                    bound = float(sample.labels["le"])
                    series = histograms.setdefault(name, {}).setdefault(_label_key(sample.labels, "le"), {})
                    series[bound] = sample.value
                elif sample_name == f"{name}_created":
                    created_gauges[(name, _label_key(sample.labels))] = sample.value
            elif family.type == "counter":
                if sample_name in (f"{name}_total", name):
                    counters.setdefault(name, {})[_label_key(sample.labels)] = sample.value
                elif sample_name == f"{name}_created":
                    created_gauges[(name, _label_key(sample.labels))] = sample.value
            elif family.type in ("gauge", "unknown"):
                if sample_name.endswith("_created"):
                    # prometheus_client writes `<family>_created` as a separate gauge family.
                    created_gauges[(sample_name.removesuffix("_created"), _label_key(sample.labels))] = sample.value
                else:
                    gauges.setdefault(name, {})[_label_key(sample.labels)] = sample.value

    created = {key: ts for key, ts in created_gauges.items() if key[0] in counters or key[0] in histograms}
    return Snapshot(
        engine=engine,
        model=model,
        scraped_at=time.time() if scraped_at is None else scraped_at,
        histograms=histograms,
        counters=counters,
        gauges=gauges,
        created=created,
    )


# --- Quantiles ---------------------------------------------------------------------------------------


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """The q-quantile of cumulative bucket counts {upper bound: count}, as PromQL's histogram_quantile.

    Linear interpolation inside the bucket the rank falls in, 0 as the lower bound of a first bucket
    with a positive bound, the last finite bound when the rank falls in +Inf. None (PromQL's NaN) when
    there are no observations, no +Inf bucket or fewer than two buckets.
    """
    if math.isnan(q):
        return None
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    bounds = sorted(buckets)
    if len(bounds) < 2 or bounds[-1] != math.inf:
        return None
    # Cumulative counts must not decrease; scrapes racing with observations (or a partial reset) can
    # break that, and Prometheus repairs it the same way: carry the running maximum forward.
    counts: list[float] = []
    for bound in bounds:
        counts.append(max(buckets[bound], counts[-1] if counts else 0.0))
    observations = counts[-1]
    if observations <= 0:
        return None
    rank = q * observations
    b = next((i for i in range(len(bounds) - 1) if counts[i] >= rank), len(bounds) - 1)
    if b == len(bounds) - 1:
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


def _restarted(prev: Snapshot, cur: Snapshot, name: str, key: LabelKey) -> bool:
    before, after = prev.created.get((name, key)), cur.created.get((name, key))
    return before is not None and after is not None and before != after


def _counter_increase(before: float | None, after: float, reset: bool) -> float:
    # Prometheus' rule: a counter that went down was reset, so all of its current value is new.
    # A series absent from the earlier scrape was created during the interval: all of it is new too.
    if before is None or reset or after < before:
        return after
    return after - before


def _histogram_increase(
    before: Mapping[float, float] | None, after: Mapping[float, float], reset: bool
) -> dict[float, float]:
    # Buckets of one series reset together when the engine restarts. Checking them as a group catches
    # a restart even when a busy new process has already passed the old count in some buckets.
    if before is None or reset or set(before) != set(after) or any(after[b] < before[b] for b in after):
        return dict(after)
    return {b: after[b] - before[b] for b in after}


def increments(prev: Snapshot, cur: Snapshot) -> Increments:
    """Increments of one engine between two of its scrapes, with counter resets handled."""
    if prev.engine != cur.engine:
        raise ValueError(f"engine changed between scrapes ({prev.engine} → {cur.engine})")
    interval = cur.scraped_at - prev.scraped_at
    if interval <= 0:
        raise ValueError("the second scrape must be later than the first")

    histograms: dict[str, dict[float, float]] = {}
    for name, series in cur.histograms.items():
        summed: dict[float, float] = {}
        for key, buckets in series.items():
            before = prev.histograms.get(name, {}).get(key)
            for bound, inc in _histogram_increase(before, buckets, _restarted(prev, cur, name, key)).items():
                summed[bound] = summed.get(bound, 0.0) + inc
        histograms[name] = summed

    counters: dict[str, dict[LabelKey, float]] = {}
    for name, series in cur.counters.items():
        before = prev.counters.get(name, {})
        counters[name] = {
            key: _counter_increase(before.get(key), value, _restarted(prev, cur, name, key))
            for key, value in series.items()
        }

    return Increments(
        engine=cur.engine,
        model=cur.model or prev.model,
        interval_s=interval,
        histograms=histograms,
        counters=counters,
        gauge_sums={name: math.fsum(series.values()) for name, series in cur.gauges.items()},
        gauge_counts={name: len(series) for name, series in cur.gauges.items()},
    )


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
    counters: dict[str, dict[LabelKey, float]] = {}
    gauge_sums: dict[str, float] = {}
    gauge_counts: dict[str, int] = {}
    for item in items:
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

    def as_dict(self) -> dict:
        """Every figure, JSON-ready."""
        return asdict(self)

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


def figures_from_increments(inc: Increments) -> Figures:
    """Compute the figures of an interval from (possibly merged) increments."""
    names = ENGINES[inc.engine]

    def quantile(family: str, q: float) -> float | None:
        buckets = inc.histograms.get(family)
        return None if buckets is None else histogram_quantile(q, buckets)

    def gauge_sum(family: str) -> float | None:
        return inc.gauge_sums.get(family)

    def gauge_mean(family: str) -> float | None:
        count = inc.gauge_counts.get(family)
        return inc.gauge_sums[family] / count if count else None

    values = dict(
        ttft_p50_s=quantile(names.ttft, 0.50),
        ttft_p95_s=quantile(names.ttft, 0.95),
        ttft_p99_s=quantile(names.ttft, 0.99),
        itl_p50_s=quantile(names.itl, 0.50),
        itl_p95_s=quantile(names.itl, 0.95),
        kv_cache_usage=gauge_mean(names.kv_usage),
        running=gauge_sum(names.running),
        waiting=gauge_sum(names.waiting),
        prefix_cache_hit_rate=prefix_cache_hit_rate(inc),
        prompt_tokens_per_s=_per_second(inc, names.prompt_tokens),
        generation_tokens_per_s=_per_second(inc, names.generation_tokens),
        preemptions=_counter_sum(inc, names.preemptions) if names.preemptions else None,
        success_rate=success_rate(inc),
    )
    return Figures(
        engine=inc.engine,
        model=inc.model,
        interval_s=inc.interval_s,
        pods=inc.pods,
        # An exposition may carry NaN or ±Inf samples; they are no figure (and not valid JSON).
        **{key: value if value is None or math.isfinite(value) else None for key, value in values.items()},
    )


def figures(prev: Snapshot, cur: Snapshot) -> Figures:
    """The figures of one engine for the interval between two of its scrapes."""
    return figures_from_increments(increments(prev, cur))
