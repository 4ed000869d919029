"""Rollouts of a service's new revision beside its stable one, and every decision taken about them.

A `Rollout` is the state the controller (apps/rollouts/controller.py, beat-driven) steps and the reconciler
renders (apps/rollouts/plan.py): which revision is stable, which is the canary, at which step. A
`RolloutDecision` is kept for every window judged and every manual action, like a ScalingDecision: the step,
the window, each metric for both revisions, the verdict and its reason in words, and what was done.
`StableRevision` remembers what the stable workloads run, so a new revision can be told from it.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from apps.core.access import restricted, tenant_owned
from apps.rollouts.choices import ACTIVE_PHASES, DecisionAction, RolloutPhase, Verdict
from apps.serving.models import InferenceService


class Rollout(models.Model):
    """One canary rollout of revision `to_revision` beside `from_revision`, step by step."""

    service = models.ForeignKey(InferenceService, on_delete=models.CASCADE, related_name="rollouts")
    from_revision = models.PositiveIntegerField(help_text="The stable revision.")
    to_revision = models.PositiveIntegerField(help_text="The canary revision.")
    phase = models.CharField(max_length=16, choices=RolloutPhase.choices, default=RolloutPhase.RUNNING)
    strategy = models.JSONField(help_text="The service's canary strategy when the rollout started (its steps).")
    step = models.PositiveSmallIntegerField(default=0, help_text="Index of the current step in strategy.steps.")
    step_started_at = models.DateTimeField()
    window_started_at = models.DateTimeField(help_text="Where the current analysis window began.")
    extensions = models.PositiveSmallIntegerField(default=0, help_text="Inconclusive windows at this step.")
    canary_replicas = models.JSONField(
        default=dict, blank=True,
        help_text="{role: replicas} of the canary unit as the autoscaler or the last step set them (a role not "
                  "named: its share of the stable pool).")
    reason = models.TextField(blank=True, help_text="Why it stands where it stands, in words.")
    created = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = restricted(tenant_owned("service__tenant"))

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [models.UniqueConstraint(fields=["service"], condition=models.Q(phase__in=ACTIVE_PHASES),
                                               name="rollouts_one_active_per_service")]

    def __str__(self) -> str:
        return f"{self.service} revision {self.from_revision} → {self.to_revision} ({self.phase})"

    @property
    def tenant_id(self) -> int:
        return self.service.tenant_id

    @property
    def steps(self) -> list[dict]:
        from apps.serving.rollout_spec import canary_steps

        return canary_steps(self.strategy)

    @property
    def weight(self) -> int:
        """The canary's share of the requests now, in percent (0 once the rollout has ended)."""
        if self.phase not in ACTIVE_PHASES:
            return 0
        return self.steps[self.step]["weight"]

    @property
    def active(self) -> bool:
        return self.phase in ACTIVE_PHASES


class RolloutDecision(models.Model):
    """One analysis window judged, or one manual action, of a rollout."""

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="decisions")
    service = models.ForeignKey(InferenceService, on_delete=models.CASCADE, related_name="rollout_decisions")
    time = models.DateTimeField()
    step = models.PositiveSmallIntegerField()
    weight = models.PositiveSmallIntegerField(help_text="The canary's share of the requests at that step, in %.")
    window_start = models.DateTimeField(null=True, blank=True)
    window_end = models.DateTimeField(null=True, blank=True)
    verdict = models.CharField(max_length=16, choices=Verdict.choices, blank=True)
    action = models.CharField(max_length=16, choices=DecisionAction.choices)
    reason = models.TextField()
    metrics = models.JSONField(default=list, blank=True,
                               help_text="[{name, canary, stable, allowed, canary_lower, outcome, reason}]")
    canary_requests = models.PositiveIntegerField(default=0)
    stable_requests = models.PositiveIntegerField(default=0)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+")
    actor_repr = models.CharField(max_length=150, blank=True, help_text="Who acted; empty: the controller.")

    objects = restricted(tenant_owned("service__tenant"))

    class Meta:
        ordering = ["-time", "-id"]
        indexes = [models.Index(fields=["service", "-time"], name="rollouts_decision_recent")]

    def __str__(self) -> str:
        return f"{self.rollout_id} step {self.step}: {self.action}"


class StableRevision(models.Model):
    """The revision a service's stable workloads run (what a new revision is rolled out beside)."""

    service = models.OneToOneField(InferenceService, on_delete=models.CASCADE, related_name="stable_revision")
    revision = models.PositiveIntegerField()
    updated = models.DateTimeField(auto_now=True)

    objects = restricted(tenant_owned("service__tenant"))

    def __str__(self) -> str:
        return f"{self.service} runs revision {self.revision}"
