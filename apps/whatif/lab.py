"""The what-if lab: one load replayed against a service's current configuration and its alternatives.

A load is requests as they came: from an uploaded trace (`capacity.traces`: Azure, BurstGPT, JSONL), or the
service's own traffic: as the gateway metered it (`UsageRow`: exact arrival times and token counts), or where
the gateway metered none, as the engines' telemetry shows it per minute (`apps.whatif.recorded`); either way
with the prefix-cache hit rate the engines measured. Each
scenario replays the same load on the fleet simulation (`apps.whatif.fleet`) on a simulated clock; requests
longer than a scenario's context are refused there, as the engine refuses them, and count as misses.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from apps.whatif.fleet import OverBudget, Simulation, quantile
from apps.whatif.recorded import prefix_hit_rate, telemetry_window
from apps.whatif.scenarios import ScenarioError, default_alternatives, parse_alternatives, scenario
from capacity.traces import MAX_SPAN, TraceRequest, parse_trace

RECORDED_WINDOW = timedelta(hours=1)
DEFAULT_PREFIX_SHARE = 0.5  # of each prompt, shared by the requests of one prefix_id when no hit rate was measured
MAX_TIMELINE_POINTS = 2_000  # a scenario's timeline in a result, thinned evenly (a week has 40,320 periods)


class LoadError(ValueError):
    """No load to replay, or a trace that cannot be read; the message says which and why."""


@dataclass
class Load:
    source: str  # "trace:<format>", "recorded" (the gateway's rows) or "recorded:engines" (the engines' telemetry)
    requests: list[TraceRequest]
    prefix_hit_rate: float | None = None  # measured live; the replay shares that much of each prompt
    start: datetime | None = None  # the first arrival's wall-clock time (a recorded load's; calibration reads it)

    @property
    def duration_s(self) -> float:
        return self.requests[-1].t if self.requests else 0.0


def check_size(requests: int, duration_s: float) -> None:
    """Raise LoadError when a load is larger than one run replays: more than WHATIF_MAX_REQUESTS requests, or a
    span past a trace's (capacity.traces.MAX_SPAN); a replay's memory and simulated clock grow with both."""
    limit = settings.WHATIF_MAX_REQUESTS
    if requests > limit:
        raise LoadError(f"the load has {requests:,} requests; a run replays at most {limit:,} (WHATIF_MAX_REQUESTS)")
    if duration_s > MAX_SPAN.total_seconds():
        raise LoadError(f"the load spans {duration_s / 86400:.1f} days; a run replays at most {MAX_SPAN.days} days")


def trace_load(data: bytes, fmt: str) -> Load:
    """A load from an uploaded trace; raises capacity.traces.TraceError naming the bad lines."""
    trace = parse_trace(data, fmt)
    return Load(f"trace:{fmt}", trace.requests)


def recorded_load(service, window: timedelta = RECORDED_WINDOW, until: datetime | None = None) -> Load:
    """The service's requests of the last `window`: as the gateway metered them (exact times and lengths), or
    else as its engines' telemetry shows them minute by minute (`apps.whatif.recorded`)."""
    from apps.gateway.models import UsageRow

    until = until or timezone.now()
    since = until - window
    rows = list(UsageRow.objects.filter(service_id=service.pk, at__gte=since, at__lte=until, status=200,
                                        completion_tokens__gt=0)
                .order_by("at").values_list("at", "prompt_tokens", "completion_tokens", "prefix_blocks"))
    hit_rate = prefix_hit_rate(service, since, until)
    if rows:
        origin = rows[0][0]
        groups = shared_prefixes([blocks for *_, blocks in rows])
        requests = [TraceRequest((at - origin).total_seconds(), max(prompt, 1), completion, group)
                    for (at, prompt, completion, _), group in zip(rows, groups, strict=True)]
        return Load("recorded", requests, hit_rate, origin)
    start, requests = telemetry_window(service, since, until)
    if not requests:
        raise LoadError(f"no recorded load for {service}: neither the gateway nor the engines' telemetry shows "
                        f"a finished request in the last {window.total_seconds() / 60:.0f} minutes; upload a "
                        "trace instead (--trace FILE)")
    return Load("recorded:engines", requests, hit_rate, start)


def shared_prefixes(blocks: list[list[int] | None]) -> list[str | None]:
    """Each request's prefix group from the gateway's chained prefix hashes (`UsageRow.prefix_blocks`, one hash
    per 64-character chunk and all before it): the deepest hash it shares with another request of the load, so
    the turns of one conversation, or the questions about one document, share a prefix in the replay; None
    where it shares nothing (or the gateway hashed no prompt)."""
    seen: Counter[int] = Counter()
    for chain in blocks:
        seen.update(chain or ())
    out = []
    for chain in blocks:
        deepest = next((h for h in reversed(chain or ()) if seen[h] > 1), None)
        out.append(None if deepest is None else str(deepest))
    return out


def prefix_layout(requests: list[TraceRequest], hit_rate: float | None,
                  block: int = 1) -> tuple[float, list[int] | None]:
    """How the replay shares prompt prefixes: (the share of each prompt that is a prefix, each request's prefix
    group or None for one prefix common to all).

    Without prefix ids the share is the measured hit rate, from one common prefix. With them (a JSONL trace's
    `prefix_id`, a session), requests of one id share a prefix: the same leading tokens, that share of each
    prompt, so a request finds cached what its own share and the longest one of its id before it have in common
    (and the first of each id nothing), in whole `block`s of the engine's KV cache, as its prefix cache finds
    it. The share is the one at which that adds up to the hits measured (`_fitted_share`); without a measured
    rate, half of each prompt (DEFAULT_PREFIX_SHARE, an assumption docs/whatif.md states)."""
    ids = [r.prefix_id for r in requests]
    named = [i for i in ids if i is not None]
    if not named:
        return hit_rate or 0.0, None
    numbers: dict[str, int] = {}
    groups = [-1 if i is None else numbers.setdefault(i, len(numbers)) for i in ids]
    if hit_rate is None:
        return DEFAULT_PREFIX_SHARE, groups
    return _fitted_share(requests, groups, hit_rate, block), groups


def _fitted_share(requests: list[TraceRequest], groups: list[int], hit_rate: float, block: int = 1) -> float:
    """The smallest share s of each prompt at which the requests, in arrival order, find `hit_rate` of all prompt
    tokens cached: each finds min(s x its prompt, the longest s x prompt of its group before it), in whole blocks.
    It rises with s, so by bisection; 1 where even whole prompts find fewer."""
    target = hit_rate * sum(r.prompt_tokens for r in requests)

    def hits(s: float) -> float:
        longest: dict[int, float] = {}
        found = 0.0
        for r, g in zip(requests, groups, strict=True):
            if g < 0:
                continue
            shared, before = s * r.prompt_tokens, longest.get(g)
            if before is not None:
                found += min(shared, before) // block * block
            if before is None or shared > before:
                longest[g] = shared
        return found

    if hits(1.0) <= target:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if hits(mid) < target else (lo, mid)
    return round(hi, 4)


def _replay(sc, load: Load, on_tick) -> dict:
    limit = sc.spec.core.max_model_len
    fits = [r for r in load.requests if r.prompt_tokens + r.output_tokens <= limit]
    hours = max(load.duration_s, 1.0) / 3600
    share, groups = prefix_layout(fits, load.prefix_hit_rate, sc.spec.core.block_size)
    simulation = Simulation(sc.decide, [r.t for r in fits], [(r.prompt_tokens, r.output_tokens) for r in fits],
                            sc.spec, hours, sc.start_replicas, slo=sc.slo, gpus=sc.gpus,
                            prefix_share=share, prefix_groups=groups, routing=sc.routing)
    timeline: list = []
    run = simulation.run(sc.name, timeline, on_tick=on_tick)
    timeline = timeline[::max(1, math.ceil(len(timeline) / MAX_TIMELINE_POINTS))]
    itl_p50 = quantile(run.itl, 0.5)
    return {"name": sc.name, "changes": sc.changes, **run.summary(len(load.requests)),
            "itl_p50_s": None if itl_p50 is None else round(itl_p50, 3), "preemptions": run.preemptions,
            "tokens": run.tokens,
            "over_context": len(load.requests) - len(fits), "max_model_len": limit,
            "gpu_type": sc.spec.core.gpu.key,
            "gpus_per_replica": sc.gpus, "ttft_slo_s": sc.slo.ttft_s, "itl_slo_s": sc.slo.itl_s,
            "timeline": [{"t": t, "replicas": n, "ttft_p95_s": p} for t, n, p in timeline]}


def build_scenarios(service, alternatives: list[dict] | None) -> list:
    """The current configuration's scenario, then each alternative's (the lab's defaults when None); raises
    ScenarioError naming every refused alternative and field, before anything runs."""
    alternatives = default_alternatives(service) if alternatives is None else parse_alternatives(alternatives)
    scenarios = [scenario(service, {}, "current")]
    problems = []
    for i, alt in enumerate(alternatives):
        try:
            scenarios.append(scenario(service, alt, f"alternatives[{i}]", slo=scenarios[0].slo))
        except ScenarioError as exc:
            problems += exc.problems
    if problems:
        raise ScenarioError(problems)
    return scenarios


def run_whatif(service, load: Load, alternatives: list[dict] | None = None,
               cpu_budget_s: float | None = None, progress=None) -> dict:
    """Replay `load` against the current configuration (first) and each alternative (the lab's defaults when
    None). Raises ScenarioError before anything runs when an alternative is refused, LoadError when the load is
    larger than a run replays (`check_size`); a replay over the CPU budget (WHATIF_CPU_BUDGET_SECONDS by default;
    this thread's CPU time, so other work in a threaded worker does not count) or the wall-clock one
    (WHATIF_WALL_BUDGET_SECONDS) ends the run, which then says so in `stopped` and lists only the scenarios that
    finished. `progress(fraction)`, when given, is called as the replays advance (at each arrival and period);
    it may raise to stop the run (a cancel)."""
    scenarios = build_scenarios(service, alternatives)
    check_size(len(load.requests), load.duration_s)
    if cpu_budget_s is None:
        cpu_budget_s = settings.WHATIF_CPU_BUDGET_SECONDS
    wall_budget_s = settings.WHATIF_WALL_BUDGET_SECONDS
    started, cpu_started = time.monotonic(), time.thread_time()
    results, stopped = [], None
    for i, sc in enumerate(scenarios):

        def on_tick(t: float, end: float, i=i, name=sc.name) -> None:
            over = ("CPU", cpu_budget_s) if time.thread_time() - cpu_started > cpu_budget_s else \
                ("wall-clock", wall_budget_s) if time.monotonic() - started > wall_budget_s else None
            if over:
                raise OverBudget(f"{name}: stopped at {t:.0f} s of {end:.0f} s of load, over the {over[0]} budget of "
                                 f"{over[1]:g} s")
            if progress is not None:
                progress((i + min(t / end, 1.0) if end else i + 1) / len(scenarios))

        try:
            results.append(_replay(sc, load, on_tick))
        except OverBudget as exc:
            stopped = str(exc)
            break
    return {"service": str(service), "source": load.source, "requests": len(load.requests),
            "prefix_hit_rate": load.prefix_hit_rate,
            "duration_s": round(load.duration_s, 3), "wall_s": round(time.monotonic() - started, 3),
            "cpu_s": round(time.thread_time() - cpu_started, 3), "stopped": stopped, "scenarios": results}
