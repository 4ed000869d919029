"""The Prometheus source: PromQL that computes the same figures as `figures.py`, and a small API client.

For large fleets a cluster can point at a Prometheus server that already scrapes the engines, instead
of the control plane scraping every pod itself. `figure_queries` writes one instant query per figure
(histogram_quantile over summed bucket rates, ratios of summed counter rates), `PrometheusClient`
runs them against `/api/v1/query`, and `query_figures` returns `figures.Figures`, per group of labels
(one service, or every pod with `by=("pod",)`). Prometheus' own `rate()` handles counter resets.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields

from .exposition import ENGINES, SGLANG, VLLM
from .figures import Figures

QUANTILES = {"ttft_p50_s": ("ttft", 0.5), "ttft_p95_s": ("ttft", 0.95), "ttft_p99_s": ("ttft", 0.99)}
QUANTILES |= {"itl_p50_s": ("itl", 0.5), "itl_p95_s": ("itl", 0.95)}
QUANTILES |= {"queue_time_p95_s": ("queue_time", 0.95), "prompt_tokens_p95": ("request_prompt_tokens", 0.95)}

_REGEX_SPECIALS = frozenset(".^$*+?()[]{}|\\")


class PrometheusError(Exception):
    """The Prometheus API could not be reached or answered with an error."""


def _string(value: str) -> str:
    """A PromQL double-quoted string literal."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _regex_literal(value: str) -> str:
    return "".join(f"\\{ch}" if ch in _REGEX_SPECIALS else ch for ch in value)


@dataclass(frozen=True)
class PodSelector:
    """Which engine pods to read: a namespace, optionally exact pod names and extra label equalities."""

    namespace: str
    pods: Sequence[str] = ()
    labels: Mapping[str, str] = field(default_factory=dict)

    def matchers(self, *extra: str) -> str:
        """The label matchers inside `{…}`, with `extra` matchers (already written) appended."""
        parts = [f"namespace={_string(self.namespace)}"]
        if self.pods:
            parts.append(f"pod=~{_string('|'.join(_regex_literal(p) for p in sorted(self.pods)))}")
        parts += [f"{name}={_string(value)}" for name, value in sorted(self.labels.items())]
        parts += extra
        return ",".join(parts)


def figure_queries(engine: str, selector: PodSelector, window_s: int = 60, by: Sequence[str] = ()) -> dict[str, str]:
    """One PromQL instant query per figure for `engine` ("vllm" or "sglang"), grouped by the `by` labels.

    Keys are the Figures field names plus `model` (a query whose result carries `model_name`) and `pods`.
    """
    if window_s < 1:
        raise ValueError("the window must be at least one second")
    names = ENGINES[engine]
    prefix = names.prefix
    window = f"[{int(window_s)}s]"
    group = f" by ({', '.join(by)})" if by else ""

    def series(family: str, *extra: str) -> str:
        return f"{prefix}{family}{{{selector.matchers(*extra)}}}"

    def rate_sum(family: str, *extra: str) -> str:
        return f"sum{group} (rate({series(family + '_total', *extra)}{window}))"

    queries: dict[str, str] = {}
    for key, (histogram, q) in QUANTILES.items():
        family = getattr(names, histogram)
        by_le = ", ".join([*by, "le"])
        queries[key] = f"histogram_quantile({q}, sum by ({by_le}) (rate({series(family + '_bucket')}{window})))"
    queries["kv_cache_usage"] = f"avg{group} ({series(names.kv_usage)})"
    queries["running"] = f"sum{group} ({series(names.running)})"
    queries["waiting"] = f"sum{group} ({series(names.waiting)})"
    queries["prompt_tokens_per_s"] = rate_sum(names.prompt_tokens)
    queries["requests_per_s"] = f"sum{group} (rate({series(names.finished + '_total')}{window}))"
    # As figures.queue_figures: the requests waiting × the window's mean prompt (the histogram's sum / count).
    prompts = names.request_prompt_tokens
    mean = (f"sum{group} (rate({series(prompts + '_sum')}{window}))"
            f" / sum{group} (rate({series(prompts + '_count')}{window}))")
    queries["waiting_prompt_tokens"] = f"{queries['waiting']} * ({mean})"
    queries["generation_tokens_per_s"] = rate_sum(names.generation_tokens)
    if engine == VLLM:
        queries["prefix_cache_hit_rate"] = f"{rate_sum('prefix_cache_hits')} / {rate_sum('prefix_cache_queries')}"
        ok = rate_sum("request_success", 'finished_reason!~"abort|error"')
        queries["success_rate"] = f"{ok} / {rate_sum('request_success')}"
        queries["spec_acceptance_rate"] = (f"{rate_sum('spec_decode_num_accepted_tokens')}"
                                           f" / {rate_sum('spec_decode_num_draft_tokens')}")
    elif engine == SGLANG:
        # SGLang's windowed formula (engines.md): the *_hit modes over all modes.
        hits = rate_sum("prefill_effective_tokens", 'mode=~".*_hit"')
        queries["prefix_cache_hit_rate"] = f"{hits} / {rate_sum('prefill_effective_tokens')}"
        # An engine that never aborted may not export the aborted series yet: count it as zero.
        requests = rate_sum("num_requests")
        aborted = f"({rate_sum('num_aborted_requests')} or {requests} * 0)"
        queries["success_rate"] = f"1 - {aborted} / {requests}"
    queries |= _cpu_tier_queries(engine, rate_sum, series, group, by)
    if names.preemptions:
        queries["preemptions"] = f"sum{group} (increase({series(names.preemptions + '_total')}{window}))"
    queries["model"] = f"group by ({', '.join([*by, 'model_name'])}) ({series(names.running)})"
    queries["pods"] = f"count{group} (group by ({', '.join(dict.fromkeys([*by, 'pod']))}) ({series(names.running)}))"
    return queries


def _cpu_tier_queries(engine: str, rate_sum, series, group: str, by: Sequence[str]) -> dict[str, str]:
    """The KV cache's CPU tier, as `figures.cpu_tier_figures` computes it; no data (None) without a tier.

    vLLM: the KV connector's external prefix-cache hits over its queries, and those hits a second (vLLM exports
    no fill gauge and the tier's size is only a label of `cache_config_info`, so `cpu_usage` stays None here).
    SGLang: the `host_hit` mode of the prefill's effective tokens over all modes (zero while HiCache has loaded
    nothing, absent without HiCache), the host pool's used over total tokens, and `load_back_tokens` a second.
    """
    if engine == VLLM:
        hits = rate_sum("external_prefix_cache_hits")
        return {"cpu_hit_rate": f"{hits} / {rate_sum('external_prefix_cache_queries')}", "cpu_load_tokens_per_s": hits}
    if engine != SGLANG:
        return {}
    total = f"sum{group} ({series('hicache_host_total_tokens')})"
    effective = rate_sum("prefill_effective_tokens")
    host_hit = rate_sum("prefill_effective_tokens", 'mode="host_hit"')
    host = f"({host_hit} or {effective} * 0)"
    on = f"on ({', '.join(by)})"
    return {"cpu_hit_rate": f"{host} / {effective} and {on} {total}",
            "cpu_usage": f"sum{group} ({series('hicache_host_used_tokens')}) / {total}",
            "cpu_load_tokens_per_s": rate_sum("load_back_tokens")}


@dataclass(frozen=True)
class Sample:
    """One element of an instant-query result: its labels and value (None for NaN or ±Inf)."""

    labels: dict[str, str]
    value: float | None


def _value(raw: str) -> float | None:
    value = float(raw)
    # NaN (0/0: no data in the window) and ±Inf have no meaning as a figure.
    return value if math.isfinite(value) else None


def parse_query_response(payload: Mapping) -> list[Sample]:
    """The samples of a `/api/v1/query` JSON response; PrometheusError for an error response."""
    if payload.get("status") != "success":
        kind = payload.get("errorType", "error")
        raise PrometheusError(f"{kind}: {payload.get('error', 'unknown error')}")
    data = payload.get("data") or {}
    result_type = data.get("resultType")
    result = data.get("result")
    if result_type == "vector":
        return [Sample(labels=dict(item.get("metric", {})), value=_value(item["value"][1])) for item in result]
    if result_type == "scalar":
        return [Sample(labels={}, value=_value(result[1]))]
    raise PrometheusError(f"unexpected result type {result_type!r} for an instant query")


class PrometheusClient:
    """A minimal client for a Prometheus server's instant-query API."""

    def __init__(self, base_url: str, timeout: float = 10.0, headers: Mapping[str, str] | None = None):
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise PrometheusError(f"{base_url!r} is not an http(s) URL")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.headers = dict(headers or {})

    def query(self, promql: str, at: float | None = None) -> list[Sample]:
        """Evaluate `promql` at time `at` (now if None) and return the samples."""
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        url = f"{self.base_url}/api/v1/query?{urllib.parse.urlencode(params)}"
        request = urllib.request.Request(url, headers={"Accept": "application/json", **self.headers})  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                body = response.read()
        except urllib.error.HTTPError as exc:
            # Prometheus explains bad queries (400, 422) and overload (503) in a JSON body.
            body = exc.read()
            try:
                payload = json.loads(body)
            except ValueError:
                raise PrometheusError(f"{self.base_url}: HTTP {exc.code} {exc.reason}") from exc
            return parse_query_response(payload)
        except (urllib.error.URLError, OSError) as exc:
            raise PrometheusError(f"{self.base_url}: {getattr(exc, 'reason', exc)}") from exc
        try:
            payload = json.loads(body)
        except ValueError as exc:
            raise PrometheusError(f"{self.base_url}: response is not JSON") from exc
        return parse_query_response(payload)


def query_figures(
    client: PrometheusClient,
    engine: str,
    selector: PodSelector,
    window_s: int = 60,
    by: Sequence[str] = (),
    at: float | None = None,
) -> dict[tuple[str, ...], Figures]:
    """Figures over the last `window_s` seconds from Prometheus, keyed by the values of the `by` labels.

    With `by=()` the one key is `()`: the whole selection merged, as `merge_increments` would.
    Every query is evaluated at the same instant so the figures describe one window.
    """
    at = time.time() if at is None else at
    values: dict[tuple[str, ...], dict[str, float | str | None]] = {}
    for key, promql in figure_queries(engine, selector, window_s, by).items():
        for sample in client.query(promql, at):
            group = tuple(sample.labels.get(label, "") for label in by)
            row = values.setdefault(group, {})
            row[key] = sample.labels.get("model_name") if key == "model" else sample.value
    figure_names = {f.name for f in fields(Figures)} - {"engine", "model", "interval_s", "pods"}
    return {
        group: Figures(
            engine=engine,
            model=row.get("model"),
            interval_s=float(window_s),
            pods=int(row.get("pods") or 0),
            **{name: row.get(name) for name in figure_names},
        )
        for group, row in values.items()
    }
