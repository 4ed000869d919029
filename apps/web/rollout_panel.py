"""What the service page's Rollout panel shows (`templates/portal/partials/rollout.html`): the strategy, the
rollout that runs (or ran last) and the timeline of its decisions, each with both revisions' TTFT p95 side by side
and the verdict's reason in words."""

from __future__ import annotations

from apps.rollouts.models import Rollout
from apps.serving.rollout_spec import canary_steps, is_canary

TIMELINE_LENGTH = 50


def _ttft(decision) -> dict | None:
    for metric in decision.metrics or []:
        if metric.get("name") == "TTFT p95":
            return {"canary_ms": round(metric["canary"] * 1000), "stable_ms": round(metric["stable"] * 1000)}
    return None


def rollout_context(service) -> dict:
    """The latest rollout of the service, its decisions newest first, and the steps of its canary strategy."""
    rollout = Rollout.objects.filter(service=service).first()
    decisions = list(rollout.decisions.order_by("-time", "-id")[:TIMELINE_LENGTH]) if rollout else []
    steps = canary_steps(service.rollout) if is_canary(service.rollout) else []
    return {"rollout": rollout, "rollout_steps": [s["weight"] for s in steps],
            "timeline": [{"decision": d, "ttft": _ttft(d)} for d in decisions]}
