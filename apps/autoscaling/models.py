"""Stored autoscaling: a row per decision that changed, held or could not change a pool, the autoscaler's
memory per pool (HPA recommendations and scale events, cold start, counts of evaluations that changed
nothing), and the activation signal the scraper reads from a serverless service's router.

The beat task (`workers.autoscale`) writes these; the service page, the fleet page and
`GET /api/v1/services/{id}/decisions/` read them.
"""

from __future__ import annotations

from django.db import models

from apps.autoscaling.choices import ScalingAction, ScalingRule
from apps.core.access import RestrictedQuerySet, restricted, tenant_owned
from apps.serving.models import InferenceService


class ScalingDecisionQuerySet(RestrictedQuerySet):
    """Decisions belong to their service's tenant."""

    rule = tenant_owned("service__tenant")


class ScalingDecision(models.Model):
    """One evaluation of one pool that recommended a change, or was held or blocked: its inputs, every
    intermediate result, the rule that decided or limited it and a reason in plain words."""

    service = models.ForeignKey(InferenceService, on_delete=models.CASCADE, related_name="scaling_decisions")
    pool = models.CharField(max_length=16)
    revision = models.PositiveIntegerField(
        null=True, blank=True, help_text="During a canary rollout, the revision whose replicas this decided.")
    time = models.DateTimeField()
    current_replicas = models.PositiveIntegerField()
    desired_replicas = models.PositiveIntegerField()
    raw_recommendation = models.PositiveIntegerField(help_text="The highest metric (or SLO guard) recommendation.")
    stabilized = models.PositiveIntegerField(help_text="After the stabilization windows.")
    limited = models.PositiveIntegerField(help_text="After the rate policies and min/max.")
    metrics = models.JSONField(default=list, help_text="[{name, value, target, ratio, replicas, missing}]")
    signals = models.JSONField(default=dict, help_text="TTFT/ITL p95, idle time, held requests, GPU figures.")
    rule = models.CharField(max_length=32, choices=ScalingRule.choices)
    action = models.CharField(max_length=16, choices=ScalingAction.choices)
    reason = models.TextField()
    cold_start_s = models.FloatField(null=True, blank=True, help_text="The last measured scale-up → Ready time.")
    generation = models.PositiveBigIntegerField(null=True, blank=True, help_text="The generation a scale produced.")

    objects = ScalingDecisionQuerySet.as_manager()

    class Meta:
        ordering = ["-time", "-id"]
        indexes = [
            models.Index(fields=["service", "-time"], name="autoscaling_decision_recent"),
            models.Index(fields=["time"], name="autoscaling_decision_age"),
        ]

    def __str__(self) -> str:
        return f"{self.service_id}/{self.pool} {self.current_replicas}→{self.desired_replicas} {self.action}"


class PoolAutoscalerState(models.Model):
    """The built-in autoscaler's memory of one pool, kept across workers: the HPA history, the cold start
    in progress and the last one measured, and evaluations counted instead of stored."""

    service = models.ForeignKey(InferenceService, on_delete=models.CASCADE, related_name="autoscaler_states")
    pool = models.CharField(max_length=16)  # the role, or `<role>@r<N>` for a canary revision's side of it
    history = models.JSONField(default=dict, blank=True)  # rules.History.as_dict()
    evaluations = models.PositiveBigIntegerField(default=0)
    unchanged = models.PositiveBigIntegerField(default=0, help_text="Evaluations that changed nothing.")
    last_evaluated_at = models.DateTimeField(null=True, blank=True)
    scale_up_started_at = models.DateTimeField(null=True, blank=True)
    scale_up_target = models.PositiveIntegerField(null=True, blank=True)
    cold_start_s = models.FloatField(null=True, blank=True)
    last_scaled_at = models.DateTimeField(null=True, blank=True)

    objects = restricted(tenant_owned("service__tenant"))

    class Meta:
        constraints = [models.UniqueConstraint(fields=["service", "pool"], name="autoscaling_state_unique")]

    def __str__(self) -> str:
        return f"{self.service_id}/{self.pool}"


class ActivationSignal(models.Model):
    """Requests a serverless service's router holds while the service has no ready engine (scraped)."""

    service = models.OneToOneField(InferenceService, on_delete=models.CASCADE, related_name="activation_signal")
    pending = models.PositiveIntegerField(default=0)
    at_gateway = models.PositiveIntegerField(default=0, help_text="Of `pending`, those the gateway holds.")
    observed_at = models.DateTimeField()

    objects = restricted(tenant_owned("service__tenant"))

    def __str__(self) -> str:
        return f"{self.service_id}: {self.pending} held"
