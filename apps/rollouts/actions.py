"""A person's actions on a service's rollout: pause, resume, promote now, abort. Each is audited (an AuditEntry on
the rollout) and kept as a decision on its timeline; an action the rollout's state does not allow raises
InvalidRolloutState (answered 409) and changes nothing."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from apps.core.audit import record_change, snapshot
from apps.core.choices import AuditAction
from apps.rollouts.choices import ACTIVE_PHASES, DecisionAction, RolloutPhase
from apps.rollouts.controller import rerender, restore_stable
from apps.rollouts.models import Rollout, RolloutDecision, StableRevision
from apps.serving.models import InferenceService

ACTIONS = ("pause", "resume", "promote", "abort")


class InvalidRolloutState(Exception):
    """The action does not apply to the rollout as it stands (no rollout running, already paused, ...)."""


def act(service: InferenceService, name: str, *, actor, via) -> Rollout:
    """Apply `name` (one of ACTIONS) to the service's active rollout."""
    with transaction.atomic():
        rollout = (Rollout.objects.select_for_update().select_related("service")
                   .filter(service=service, phase__in=ACTIVE_PHASES).first())
        if rollout is None:
            raise InvalidRolloutState(f"{service} has no rollout running; there is nothing to {name}.")
        before = snapshot(rollout)
        now = timezone.now()
        who = actor.get_username() if getattr(actor, "is_authenticated", False) else ""
        if name == "pause":
            if rollout.phase == RolloutPhase.PAUSED:
                raise InvalidRolloutState(f"The rollout of revision {rollout.to_revision} is paused already.")
            rollout.phase, action = RolloutPhase.PAUSED, DecisionAction.PAUSE
            reason = f"Paused by {who or 'a person'} at {rollout.weight} %."
        elif name == "resume":
            if rollout.phase != RolloutPhase.PAUSED:
                raise InvalidRolloutState(f"The rollout of revision {rollout.to_revision} is running, not paused.")
            # The step's window starts again: what happened while it was paused does not count.
            rollout.phase, action = RolloutPhase.RUNNING, DecisionAction.RESUME
            rollout.step_started_at = rollout.window_started_at = now
            rollout.extensions = 0
            reason = f"Resumed by {who or 'a person'} at {rollout.weight} %; the step's window starts again."
        elif name == "promote":
            action = DecisionAction.PROMOTE
            reason = f"Revision {rollout.to_revision} promoted now by {who or 'a person'}, at {rollout.weight} %."
        elif name == "abort":
            action = DecisionAction.ABORT
            reason = f"Aborted by {who or 'a person'} at {rollout.weight} %; back to revision {rollout.from_revision}."
        else:
            raise ValueError(f"unknown rollout action {name!r}")
        RolloutDecision.objects.create(rollout=rollout, service=service, time=now, step=rollout.step,
                                       weight=rollout.weight, action=action, reason=reason,
                                       actor=actor if who else None, actor_repr=who)
        if name in ("promote", "abort"):
            rollout.phase = RolloutPhase.PROMOTED if name == "promote" else RolloutPhase.ABORTED
            rollout.finished_at = now
        if name == "promote":
            StableRevision.objects.filter(service=service).update(revision=rollout.to_revision)
        rollout.reason = reason
        rollout.save()
        record_change(actor=actor, obj=rollout, action=AuditAction.UPDATE, via=via, before=before)
        if name in ("promote", "abort"):
            rerender(service.pk)
    if name == "abort":
        restore_stable(rollout, actor=actor, via=via)
    return rollout
