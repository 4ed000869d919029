"""What the service page's Rollout panel shows (`templates/portal/partials/rollout.html`): the strategy, the
rollout that runs (or ran last), both revisions' TTFT p95 over it as one chart (the scraper's per-revision series,
`static/js/rollout-chart.js`), and the timeline of its decisions, each with both revisions' TTFT p95 in the window
judged and the verdict's reason in words."""

from __future__ import annotations

from datetime import UTC, datetime

from django.utils import timezone

from apps.rollouts.models import Rollout
from apps.serving.rollout_spec import canary_steps, is_canary
from apps.telemetry.models import CANARY_ROLE, STABLE_ROLE
from apps.telemetry.series import choose_window, read_series

TIMELINE_LENGTH = 50


def _ttft(decision) -> dict | None:
    for metric in decision.metrics or []:
        if metric.get("name") == "TTFT p95":
            return {"canary_ms": round(metric["canary"] * 1000), "stable_ms": round(metric["stable"] * 1000)}
    return None


def _latest_ms(values: list) -> int | None:
    return next((round(v * 1000) for v in reversed(values) if v is not None), None)


def rollout_window(start: datetime, end: datetime | None) -> str:
    """The span the rollout's chart covers, in words: from its start to its end, or to now while it runs."""
    day = "%Y-%m-%d %H:%M"
    start, end = start.astimezone(UTC), end and end.astimezone(UTC)
    if end is None:
        return f"the rollout's window, {start:{day}} UTC to now"
    same_day = start.date() == end.date()
    return f"the rollout's window, {start:{day}} to {end:{'%H:%M' if same_day else day}} UTC"


def rollout_chart(rollout: Rollout) -> dict:
    """Both revisions' TTFT p95 from the rollout's start to its end (or now), one series each, as the chart draws
    them, and each one's latest figure in words (what the chart shows, for those who do not see it). The chart's
    axis spans that whole window (`start`, `end`, in words `span`), however few points it holds."""
    until = rollout.finished_at or timezone.now()
    window = choose_window(rollout.created, until)
    out = {"step": window.step_s, "start": rollout.created.isoformat(), "end": until.isoformat(),
           "span": rollout_window(rollout.created, rollout.finished_at), "sides": []}
    for role, revision in ((STABLE_ROLE, rollout.from_revision), (CANARY_ROLE, rollout.to_revision)):
        data = read_series(rollout.service_id, window, role)
        name = f"revision {revision} ({role})"
        latest = _latest_ms(data["ttft_p95"])
        out["sides"].append({"name": name, "time": data["time"],
                             "ttft_p95_ms": [None if v is None else round(v * 1000, 1) for v in data["ttft_p95"]],
                             "latest": f"{name} {latest} ms" if latest is not None else f"{name} no data"})
    return out


def rollout_context(service) -> dict:
    """The latest rollout of the service, its TTFT chart and decisions newest first, and the steps of its canary
    strategy."""
    rollout = Rollout.objects.filter(service=service).first()
    decisions = list(rollout.decisions.order_by("-time", "-id")[:TIMELINE_LENGTH]) if rollout else []
    steps = canary_steps(service.rollout) if is_canary(service.rollout) else []
    return {"rollout": rollout, "rollout_steps": [s["weight"] for s in steps],
            "rollout_chart": rollout_chart(rollout) if rollout else None,
            "timeline": [{"decision": d, "ttft": _ttft(d)} for d in decisions]}
