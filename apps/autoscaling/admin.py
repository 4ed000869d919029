"""Scaling decisions in the admin: read-only (the autoscaler writes them)."""

from django.contrib import admin

from apps.autoscaling.models import PoolAutoscalerState, ScalingDecision


@admin.register(ScalingDecision)
class ScalingDecisionAdmin(admin.ModelAdmin):
    list_display = ["time", "service", "pool", "current_replicas", "desired_replicas", "action", "rule"]
    list_filter = ["action", "rule", "pool"]
    search_fields = ["service__name", "service__tenant__slug", "reason"]
    date_hierarchy = "time"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(PoolAutoscalerState)
class PoolAutoscalerStateAdmin(admin.ModelAdmin):
    list_display = ["service", "pool", "evaluations", "unchanged", "cold_start_s", "last_evaluated_at"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
