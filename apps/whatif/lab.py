"""The what-if lab: one load replayed against a service's current configuration and its alternatives.

A load is requests as they came: from an uploaded trace (`capacity.traces`: Azure, BurstGPT, JSONL), or the
service's own traffic: as the gateway metered it (`UsageRow`: exact arrival times and token counts), or where
the gateway metered none, as the engines' telemetry shows it per minute (`apps.whatif.recorded`); either way
with the prefix-cache hit rate the engines measured. Each
scenario replays the same load on the fleet simulation (`apps.whatif.fleet`) on a simulated clock; requests
longer than a scenario's context are refused there, as the engine refuses them, and count as misses.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone

from apps.whatif.fleet import OverBudget, Simulation
from apps.whatif.recorded import prefix_hit_rate, telemetry_requests
from apps.whatif.scenarios import ScenarioError, default_alternatives, parse_alternatives, scenario
from capacity.traces import TraceRequest, parse_trace

RECORDED_WINDOW = timedelta(hours=1)
CPU_BUDGET_S = 600.0  # a whole run, all scenarios together


class LoadError(ValueError):
    """No load to replay, or a trace that cannot be read; the message says which and why."""


@dataclass
class Load:
    source: str  # "trace:<format>", "recorded" (the gateway's rows) or "recorded:engines" (the engines' telemetry)
    requests: list[TraceRequest]
    prefix_hit_rate: float | None = None  # measured live; the replay shares that much of each prompt

    @property
    def duration_s(self) -> float:
        return self.requests[-1].t if self.requests else 0.0


def trace_load(data: bytes, fmt: str) -> Load:
    """A load from an uploaded trace; raises capacity.traces.TraceError naming the bad lines."""
    trace = parse_trace(data, fmt)
    return Load(f"trace:{fmt}", trace.requests)


def recorded_load(service, window: timedelta = RECORDED_WINDOW) -> Load:
    """The service's requests of the last `window`: as the gateway metered them (exact times and lengths), or
    else as its engines' telemetry shows them minute by minute (`apps.whatif.recorded`)."""
    from apps.gateway.models import UsageRow

    until = timezone.now()
    since = until - window
    rows = list(UsageRow.objects.filter(service_id=service.pk, at__gte=since, status=200, completion_tokens__gt=0)
                .order_by("at").values_list("at", "prompt_tokens", "completion_tokens"))
    hit_rate = prefix_hit_rate(service, since, until)
    if rows:
        origin = rows[0][0]
        requests = [TraceRequest((at - origin).total_seconds(), max(prompt, 1), completion)
                    for at, prompt, completion in rows]
        return Load("recorded", requests, hit_rate)
    requests = telemetry_requests(service, since, until)
    if not requests:
        raise LoadError(f"no recorded load for {service}: neither the gateway nor the engines' telemetry shows "
                        f"a finished request in the last {window.total_seconds() / 60:.0f} minutes; upload a "
                        "trace instead (--trace FILE)")
    return Load("recorded:engines", requests, hit_rate)


def _replay(sc, load: Load, cpu_deadline: float) -> dict:
    limit = sc.spec.core.max_model_len
    fits = [r for r in load.requests if r.prompt_tokens + r.output_tokens <= limit]
    hours = max(load.duration_s, 1.0) / 3600
    simulation = Simulation(sc.decide, [r.t for r in fits], [(r.prompt_tokens, r.output_tokens) for r in fits],
                            sc.spec, hours, sc.start_replicas, slo=sc.slo, gpus=sc.gpus,
                            prefix_share=load.prefix_hit_rate or 0.0)
    timeline: list = []
    run = simulation.run(sc.name, timeline, cpu_deadline)
    return {"name": sc.name, "changes": sc.changes, **run.summary(len(load.requests)),
            "over_context": len(load.requests) - len(fits), "max_model_len": limit,
            "gpu_type": sc.spec.core.gpu.key,
            "gpus_per_replica": sc.gpus, "ttft_slo_s": sc.slo.ttft_s, "itl_slo_s": sc.slo.itl_s,
            "timeline": [{"t": t, "replicas": n, "ttft_p95_s": p} for t, n, p in timeline]}


def run_whatif(service, load: Load, alternatives: list[dict] | None = None,
               cpu_budget_s: float = CPU_BUDGET_S) -> dict:
    """Replay `load` against the current configuration (first) and each alternative (the lab's defaults when
    None). Raises ScenarioError before anything runs when an alternative is refused; a replay over the CPU
    budget ends the run, which then says so in `stopped` and lists only the scenarios that finished."""
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
    started, cpu_started = time.monotonic(), time.process_time()
    results, stopped = [], None
    for sc in scenarios:
        try:
            results.append(_replay(sc, load, cpu_started + cpu_budget_s))
        except OverBudget as exc:
            stopped = str(exc)
            break
    return {"service": str(service), "source": load.source, "requests": len(load.requests),
            "prefix_hit_rate": load.prefix_hit_rate,
            "duration_s": round(load.duration_s, 3), "wall_s": round(time.monotonic() - started, 3),
            "cpu_s": round(time.process_time() - cpu_started, 3), "stopped": stopped, "scenarios": results}
