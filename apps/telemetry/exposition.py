"""Engine expositions: which metric families vLLM and SGLang export, and parsing one `/metrics` text
into a `Snapshot` (the first step of the telemetry pipeline; the math follows in `figures.py`).

Pure functions over text, with no Django models and no I/O.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from apps.telemetry.textformat import Family, fast_families, library_families, select_lines

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
    # Per-request length histograms (the recorded load's length distributions); SGLang exports them only
    # with `--collect-tokens-histogram`.
    request_prompt_tokens: str = "request_prompt_tokens"
    request_generation_tokens: str = "request_generation_tokens"
    # Time a request waited before it was first scheduled (vLLM observes it when the request finishes,
    # SGLang when it is scheduled) and the count of requests finished (all reasons).
    queue_time: str = "request_queue_time_seconds"
    finished: str = "request_success"


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
        request_prompt_tokens="prompt_tokens_histogram",
        request_generation_tokens="generation_tokens_histogram",
        queue_time="queue_time_seconds",
        finished="num_requests",
    ),
}

# Counter families the engine-specific ratios read (prefix-cache hit rate, success rate).
EXTRA_FAMILIES: dict[str, tuple[str, ...]] = {
    VLLM: ("prefix_cache_hits", "prefix_cache_queries", "request_success",
           # The KV cache's CPU tier: hits through the KV connector, the bytes written to it and its size (the
           # kv_offloading_size label of cache_config_info).
           "external_prefix_cache_hits", "external_prefix_cache_queries", "kv_offload_store_bytes",
           "cache_config_info",
           # Speculative decoding: drafted and accepted tokens (only with a speculative config).
           "spec_decode_num_draft_tokens", "spec_decode_num_accepted_tokens",
           # LoRA slots (with --enable-lora): the adapters of the running and waiting requests and --max-loras, which
           # the gateway's LoRA affinity reads (apps/telemetry/lora.py).
           "lora_requests_info"),
    SGLANG: ("prefill_effective_tokens", "num_requests", "num_aborted_requests",
             "hicache_host_used_tokens", "hicache_host_total_tokens", "load_back_tokens"),
}

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
    # Each histogram series' `_sum` (the mean of what it observed is its sum increment over its count's).
    sums: Mapping[str, Mapping[LabelKey, float]] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """A JSON-ready form, so a worker can keep the previous scrape of a pod between runs."""

        def series(family_map, encode=lambda v: v):
            return {name: [[dict(key), encode(v)] for key, v in by_key.items()] for name, by_key in family_map.items()}

        return {
            "engine": self.engine,
            "model": self.model,
            "scraped_at": self.scraped_at,
            "histograms": series(self.histograms, lambda b: [[_bound_text(ub), _number(n)] for ub, n in b.items()]),
            "counters": series(self.counters, _number),
            "gauges": series(self.gauges, _number),
            "created": [[name, dict(key), _number(ts)] for (name, key), ts in self.created.items()],
            "sums": series(self.sums, _number),
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
            histograms=series(data["histograms"], lambda b: {float(ub): float(n) for ub, n in b}),
            counters=series(data["counters"], float),
            gauges=series(data["gauges"], float),
            created={(name, _label_key(labels)): float(ts) for name, labels, ts in data["created"]},
            sums=series(data.get("sums", {}), float),  # snapshots stored before sums were kept have none
        )


def _number(value: float) -> float | str:
    """A sample value as JSON that PostgreSQL's jsonb takes: NaN and ±Inf (which engines may export) as
    the strings `float()` reads back, since jsonb refuses the bare `NaN` Python's encoder writes."""
    return value if math.isfinite(value) else repr(value)


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
    wanted |= {names.request_prompt_tokens, names.request_generation_tokens, names.queue_time, names.finished}
    if names.preemptions:
        wanted.add(names.preemptions)
    return frozenset(wanted)


def parse_snapshot(text: str, scraped_at: float | None = None, *, all_families: bool = False) -> Snapshot:
    """Parse a Prometheus text exposition of a vLLM or SGLang engine into a Snapshot.

    Only the families the figures use are kept unless `all_families` is set. Raises
    NotAnEngineExposition when the text carries no engine metrics or does not parse.
    """
    engine = detect_engine(text)
    if engine is None:
        raise NotAnEngineExposition("no vllm: or sglang: metrics in the exposition")
    prefix = ENGINES[engine].prefix
    wanted = figure_families(engine)
    # The fast reader takes the engines' usual lines; anything else goes to prometheus_client.
    families = None if all_families else fast_families(text, prefix, wanted)
    try:
        if families is None:
            families = list(library_families(text if all_families else select_lines(text, prefix, wanted)))
        return _snapshot(engine, prefix, families, time.time() if scraped_at is None else scraped_at)
    except ValueError as exc:
        raise NotAnEngineExposition(f"not a Prometheus text exposition: {exc}") from exc


def _snapshot(engine: str, prefix: str, families: list[Family], scraped_at: float) -> Snapshot:
    histograms: dict[str, dict[LabelKey, dict[float, float]]] = {}
    sums: dict[str, dict[LabelKey, float]] = {}
    counters: dict[str, dict[LabelKey, float]] = {}
    gauges: dict[str, dict[LabelKey, float]] = {}
    created_gauges: dict[tuple[str, LabelKey], float] = {}
    model: str | None = None

    for family_name, kind, samples in families:
        if not family_name.startswith(prefix):
            continue
        name = family_name[len(prefix) :]
        created = f"{family_name}_created"
        if model is None:
            model = next((labels.model_name for _, labels, _ in samples if labels.model_name), None)
        # A labelled family with no series yet (SGLang creates them on the first request) is still
        # exported: an idle engine then shows 0 tokens/s rather than no figure.
        if kind == "histogram":
            series = histograms.setdefault(name, {})
            bucket, total = f"{family_name}_bucket", f"{family_name}_sum"
            for sample_name, labels, value in samples:
                if sample_name == total:
                    sums.setdefault(name, {})[labels.key] = value
                elif sample_name == bucket:
                    if labels.bound is None:
                        raise ValueError(f"a bucket of {family_name} has le={labels.le!r}, not an upper bound")
                    series.setdefault(labels.key_without_le, {})[labels.bound] = value
                elif sample_name == created:
                    created_gauges[(name, labels.key)] = value
        elif kind == "counter":
            series = counters.setdefault(name, {})
            names = (f"{family_name}_total", family_name)
            for sample_name, labels, value in samples:
                if sample_name in names:
                    series[labels.key] = value
                elif sample_name == created:
                    created_gauges[(name, labels.key)] = value
        elif kind in ("gauge", "unknown"):
            for sample_name, labels, value in samples:
                if sample_name.endswith("_created"):
                    # prometheus_client writes `<family>_created` as a separate gauge family.
                    created_gauges[(sample_name[len(prefix) : -len("_created")], labels.key)] = value
                else:
                    gauges.setdefault(name, {})[labels.key] = value

    created = {key: ts for key, ts in created_gauges.items() if key[0] in counters or key[0] in histograms}
    return Snapshot(
        engine=engine,
        model=model,
        scraped_at=scraped_at,
        histograms=histograms,
        counters=counters,
        gauges=gauges,
        created=created,
        sums=sums,
    )
