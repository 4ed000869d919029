"""Sleep or delete: what the scale-to-zero rule does with an idle serverless pool whose policy allows sleeping.

Deleting frees the GPUs while idle and pays a cold start at the next request; sleeping (vLLM's sleep mode) keeps
the pod and its GPUs for the whole idle gap and wakes in seconds. Per idle gap, in GPU-seconds of one replica:
- sleep holds its GPUs for the gap: `gap × gpus`;
- delete holds them again while the next replica starts: `cold start × gpus`.
The service's own history gives the gap: the median of the gaps between going idle (to zero or to sleep) and
the next wake, over its last `HISTORY` wakes. The rule (`when_idle: auto`) keeps the choices whose activation
time meets the service's wake objective and picks the cheaper; when neither meets it, the faster (sleep).
Pure: the caller passes the history and the estimates.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from apps.serving.idle_spec import IdleSpec, WhenIdle

HISTORY = 20  # wakes of the service the median gap is taken over
SLEEP, DELETE = "sleep", "delete"


@dataclass(frozen=True)
class IdleChoice:
    action: str  # SLEEP or DELETE
    reason: str
    gap_s: float | None = None  # the median idle gap the costs were judged on


def _s(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"


def _gpu_h(gpu_seconds: float) -> str:
    return f"{gpu_seconds / 3600:.2f} GPU-h"


def choose(spec: IdleSpec, *, gaps_s: Sequence[float], wake_s: float, cold_start_s: float | None,
           gpus: int) -> IdleChoice:
    """Sleep or delete an idle pool of `gpus` GPUs per replica, with reasons in words."""
    sleeping = f"sleep at level {spec.sleep_level} (wakes in ~{_s(wake_s)}, keeps its {gpus} GPU(s))"
    if spec.when_idle == WhenIdle.DELETE:
        return IdleChoice(DELETE, "when_idle is delete")
    if spec.when_idle == WhenIdle.SLEEP:
        return IdleChoice(SLEEP, f"when_idle is sleep: {sleeping}")
    objective = spec.wake_objective_s
    recent = list(gaps_s)[-HISTORY:]
    gap = statistics.median(recent) if recent else None
    sleep_meets = wake_s <= objective
    delete_meets = cold_start_s is not None and cold_start_s <= objective
    cold = "no cold start measured yet" if cold_start_s is None else f"a cold start takes {_s(cold_start_s)}"
    head = f"wake objective {_s(objective)}; sleep wakes in ~{_s(wake_s)}, {cold}"
    if sleep_meets and delete_meets:
        if gap is None:
            return IdleChoice(DELETE, f"{head}; both meet it and there is no wake history yet: delete, "
                                      "which holds no GPU while idle")
        history = f"median idle gap {_s(gap)} over the last {len(recent)} wake(s)"
        sleep_cost, delete_cost = gap * gpus, cold_start_s * gpus
        costs = f"sleep {_gpu_h(sleep_cost)} against delete {_gpu_h(delete_cost)} a gap"
        if sleep_cost < delete_cost:
            return IdleChoice(SLEEP, f"{head}; both meet it; {history}: {costs} → {sleeping}", gap)
        return IdleChoice(DELETE, f"{head}; both meet it; {history}: {costs} → delete", gap)
    if sleep_meets:
        why = "deleting could not be judged against it" if cold_start_s is None else "only sleep meets it"
        return IdleChoice(SLEEP, f"{head}; {why} → {sleeping}", gap)
    if delete_meets:
        return IdleChoice(DELETE, f"{head}; only delete meets it → delete", gap)
    return IdleChoice(SLEEP, f"{head}; neither meets it → the faster: {sleeping}", gap)


def idle_gaps(events: Sequence[tuple[float, str]]) -> list[float]:
    """The idle gaps of a pool from its decisions, oldest first: (time, "idle" | "wake") pairs in time order;
    each gap runs from an "idle" to the next "wake"."""
    gaps, since = [], None
    for t, kind in events:
        if kind == "idle":
            since = t if since is None else since
        elif kind == "wake" and since is not None:
            gaps.append(t - since)
            since = None
    return gaps
