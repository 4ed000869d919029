"""Scaling decisions in the admin: read-only (the autoscaler writes them)."""

from django.contrib import admin

from apps.autoscaling.models import PoolAutoscalerState, ScalingDecision
from apps.core.admin import RecordAdmin


@admin.register(ScalingDecision)
class ScalingDecisionAdmin(RecordAdmin):
    list_display = ["time", "service", "pool", "revision", "current_replicas", "desired_replicas", "action", "rule"]
    list_filter = ["action", "rule", "pool"]
    search_fields = ["service__name", "service__tenant__slug", "reason"]
    date_hierarchy = "time"


@admin.register(PoolAutoscalerState)
class PoolAutoscalerStateAdmin(RecordAdmin):
    list_display = ["service", "pool", "evaluations", "unchanged", "cold_start_s", "last_evaluated_at"]
