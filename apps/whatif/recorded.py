"""A service's recorded load rebuilt from its engines' telemetry, for when the gateway metered none of it.

The scraper stores, per scrape interval, how many requests the engines finished and the bucket increments of
their per-request prompt and output token histograms (`apps.telemetry.models.RequestMixPoint`: vLLM's
`request_prompt_tokens` / `request_generation_tokens`, SGLang's `prompt_tokens_histogram` /
`generation_tokens_histogram`). Per minute of the window this module takes:

- the arrival rate: the requests of the intervals whose middle falls in the minute (fractions carried over
  to the next minute, so the total is kept), placed at uniformly random seconds of the minute, as a Poisson
  process places a known count;
- the lengths: drawn from the minute's merged histograms by inverse CDF with PromQL's interpolation inside a
  bucket (`apps.telemetry.figures.histogram_quantile`, one definition with the dashboard's quantiles);
- the prefix-cache hit rate: the mean of the stored series' `prefix_hit_rate` over the window. The replay
  gives each prompt that share of leading tokens from one common prefix (a system prompt), so an engine with
  prefix caching finds the hits it found live.

A prompt and its output are drawn independently (the histograms do not pair them). The random draws are
seeded by the service and the minute, so the same telemetry always gives the same load.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from datetime import datetime, timedelta

from django.db.models import Avg

from apps.telemetry.choices import Resolution
from apps.telemetry.figures import histogram_quantiles
from apps.telemetry.models import SERVICE_ROLE, RequestMixPoint, SeriesPoint
from capacity.traces import TraceRequest


def _buckets(stored: list) -> dict[float, float]:
    return {math.inf if bound == "+Inf" else float(bound): float(count) for bound, count in stored}


def _add(into: dict[float, float], buckets: dict[float, float]) -> None:
    for bound, count in buckets.items():
        into[bound] = into.get(bound, 0.0) + count


def minutes_of(service, since: datetime, until: datetime) -> list[dict]:
    """Per minute of [since, until) with requests: its start (seconds from `since`), the requests finished
    (a float: intervals straddle minutes) and the merged prompt and output bucket increments."""
    minutes: dict[int, dict] = defaultdict(lambda: {"requests": 0.0, "prompt": {}, "output": {}})
    rows = (RequestMixPoint.objects.filter(service_id=service.pk, time__gt=since, time__lte=until)
            .order_by("time").values_list("time", "interval_s", "requests", "prompt_buckets", "output_buckets"))
    for at, interval_s, requests, prompt, output in rows:
        middle = (at - since).total_seconds() - interval_s / 2
        minute = minutes[max(int(middle // 60), 0)]
        minute["requests"] += requests
        _add(minute["prompt"], _buckets(prompt))
        _add(minute["output"], _buckets(output))
    return [{"start_s": 60.0 * k, **minutes[k]} for k in sorted(minutes)]


def _lengths(buckets: dict[float, float], draws: list[float]) -> list[int]:
    return [max(1, round(v or 1)) for v in histogram_quantiles(draws, buckets)]


def prefix_hit_rate(service, since: datetime, until: datetime) -> float | None:
    """The mean stored prefix-cache hit rate of the service over the window (None when never measured)."""
    return mean_figure(service, "prefix_hit_rate", since, until)


def mean_figure(service, column: str, since: datetime, until: datetime) -> float | None:
    """The mean of one stored column of the whole service over the window (None when never measured)."""
    value = (SeriesPoint.objects.filter(service_id=service.pk, role=SERVICE_ROLE, resolution=Resolution.RAW,
                                        time__gt=since, time__lte=until, **{f"{column}__isnull": False})
             .aggregate(v=Avg(column))["v"])
    return None if value is None else round(float(value), 4)


def telemetry_requests(service, since: datetime, until: datetime) -> list[TraceRequest]:
    """The requests of the window rebuilt minute by minute, times in seconds from the first arrival."""
    return telemetry_window(service, since, until)[1]


def telemetry_window(service, since: datetime, until: datetime) -> tuple[datetime | None, list[TraceRequest]]:
    """The first rebuilt arrival's wall-clock time (None without requests) and the requests from it."""
    minutes = minutes_of(service, since, until)
    out: list[TraceRequest] = []
    carry = 0.0
    origin = minutes[0]["start_s"] if minutes else 0.0
    for minute in minutes:
        total = minute["requests"] + carry
        n = math.floor(total + 1e-9)
        carry = total - n
        if n == 0:
            continue
        rng = random.Random(f"whatif:{service.pk}:{int(minute['start_s'])}")
        times = sorted(minute["start_s"] - origin + 60.0 * rng.random() for _ in range(n))
        prompts = _lengths(minute["prompt"], [rng.random() for _ in range(n)])
        outputs = _lengths(minute["output"], [rng.random() for _ in range(n)])
        out.extend(TraceRequest(t, p, o) for t, p, o in zip(times, prompts, outputs, strict=True))
    if not out:
        return None, []
    first = out[0].t  # the load starts at its first arrival, like a trace
    start = since + timedelta(seconds=origin + first)
    return start, [TraceRequest(r.t - first, r.prompt_tokens, r.output_tokens) for r in out]
