"""What the Scaling panel of a service page and the fleet page's latest decisions show (no HTTP here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from apps.autoscaling.choices import ScalingAction
from apps.autoscaling.models import PoolAutoscalerState, ScalingDecision
from apps.serving.models import InferenceService, ServiceObservation
from apps.serving.prefetch import prefetch_plan
from apps.web.attainment import slo_attainment

TIMELINE_ROWS = 200  # decisions read for the timeline; consecutive held ones fold into one line


@dataclass
class TimelineItem:
    """A decision, or a run of consecutive held decisions of one pool folded into a count."""

    decision: ScalingDecision
    held_count: int = 1
    first_time: object = None
    pools: set = field(default_factory=set)

    @property
    def folded(self) -> bool:
        return self.held_count > 1


def timeline(decisions: list[ScalingDecision]) -> list[TimelineItem]:
    """Newest first; a held decision directly after (older than) a held one of the same pool joins it."""
    items: list[TimelineItem] = []
    for d in decisions:
        last = items[-1] if items else None
        if (last and d.action == ScalingAction.HELD and last.decision.action == ScalingAction.HELD
                and last.decision.pool == d.pool):
            last.held_count += 1
            last.first_time = d.time
            continue
        items.append(TimelineItem(d, first_time=d.time))
    return items


def markers(decisions: list[ScalingDecision]) -> list[dict]:
    """Points for the replica chart, oldest first: every decision that scaled or was blocked (held ones would
    crowd it). `decisions` come newest first."""
    # UTC with a Z, as the series JSON (DjangoJSONEncoder) writes its times, so the chart reads both alike.
    return [{"time": d.time.isoformat().replace("+00:00", "Z"), "replicas": d.desired_replicas,
             "action": d.action, "pool": d.pool,
             "text": f"{d.pool}: {d.current_replicas}→{d.desired_replicas} ({d.action}) {d.reason}"[:300]}
            for d in reversed(decisions) if d.action != ScalingAction.HELD]  # oldest first, as the chart


def forecast_bands(states: dict[str, PoolAutoscalerState]) -> list[dict]:
    """Per pool, the replicas its load forecast asked for a cold start ahead, with the band its latest error
    spans (apps.autoscaling.signals.forecast_band), oldest first, timed when the forecast load was due."""
    out = []
    for pool, state in sorted(states.items()):
        band = (((state.history or {}).get("forecast") or {}).get("band")) or []
        if band:
            out.append({"pool": pool, "points": [
                {"time": datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z"), "low": low,
                 "replicas": mid, "high": high, "trusted": trusted} for t, low, mid, high, trusted in band]})
    return out


def attainment_words(a: dict | None) -> str:
    """The last hour's SLO attainment at the gateway in one sentence, the TTFT definition in force first."""
    if a is None:
        return ""
    allowance = f"{a['allowance_s']:g} s"
    parts = [f"TTFT within {allowance} {a['ttft_abs']:.1%}"]
    if a["ttft_budget"] is not None:
        parts.insert(0, f"TTFT within the budget ({allowance} + the prompt's own prefill; in force) "
                        f"{a['ttft_budget']:.1%}")
    if a["itl"] is not None:
        parts.append(f"ITL within {a['itl_target_s']:g} s {a['itl']:.1%}")
    return (f"SLO attainment, last hour at the gateway ({a['requests']} request{'s' if a['requests'] != 1 else ''}): "
            + "; ".join(parts))


def ttft_definition(decision: ScalingDecision | None) -> str:
    """Which TTFT the SLO guard judged in the pool's latest decision, in words."""
    if decision is not None and (decision.signals or {}).get("ttft_definition") == "budget":
        return "budget: the part above the prompts' own prefill time"
    return "absolute p95 (no prefill floor measured)"


def forecast_words(state: PoolAutoscalerState | None) -> str:
    """The load forecast the autoscaler keeps for a pool (apps.autoscaling.forecast), in words; '' without one."""
    f = ((state.history if state else None) or {}).get("forecast") or {}
    if f.get("level") is None:
        return ""
    trend = f"{f.get('trend', 0.0):+.0f} per evaluation"
    if f.get("trusted", True):
        return f"{f['level']:.0f} prompt tokens/s, {trend}; steering"
    return f"{f['level']:.0f} prompt tokens/s, {trend}; ignored: off by {f.get('error') or 0:.0%}"


def panel_context(service: InferenceService) -> dict:
    autoscaler = (service.autoscaling or {}).get("autoscaler", "none")
    pools = list(service.pools.all())
    states = {s.pool: s for s in PoolAutoscalerState.objects.filter(service=service)}
    decisions = list(ScalingDecision.objects.filter(service=service).order_by("-time", "-id")[:TIMELINE_ROWS])
    observation = ServiceObservation.objects.filter(service=service).only("autoscalers").first()
    return {
        "service": service,
        "autoscaler": autoscaler,
        "pool_rows": [{"pool": p, "state": states.get(p.role),
                       "policy": ((service.autoscaling or {}).get("pools") or {}).get(p.role),
                       "ttft": ttft_definition(next((d for d in decisions if d.pool == p.role), None)),
                       "forecast": forecast_words(states.get(p.role))} for p in pools],
        "timeline": timeline(decisions)[:50],
        "markers": markers(decisions),
        "forecast_bands": forecast_bands(states),
        "attainment": attainment_words(slo_attainment(service)),
        "live_autoscalers": list(observation.autoscalers) if observation else [],
        "prefetch": prefetch_plan(service),
    }


def latest_decisions(user, limit: int = 15) -> list[ScalingDecision]:
    """The newest decisions that scaled or were blocked, across the services the user may see."""
    return list(ScalingDecision.objects.restrict(user).exclude(action=ScalingAction.HELD)
                .select_related("service", "service__tenant").order_by("-time", "-id")[:limit])


def tenant_decisions(tenant, limit: int = 8) -> list[ScalingDecision]:
    """The newest decisions that scaled or were blocked among one tenant's services (the portal's Overview)."""
    return list(ScalingDecision.objects.filter(service__tenant=tenant).exclude(action=ScalingAction.HELD)
                .select_related("service").order_by("-time", "-id")[:limit])
