"""Rollouts and their decisions in the admin: read-only (the controller and the actions write them; people act
through the portal and the API, which audit every action)."""

from django.contrib import admin

from apps.core.admin import RecordAdmin
from apps.rollouts.models import Rollout, RolloutDecision, StableRevision


class RolloutDecisionInline(admin.TabularInline):
    model = RolloutDecision
    fields = ["time", "step", "weight", "verdict", "action", "reason", "actor_repr"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ["-time", "-id"]

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Rollout)
class RolloutAdmin(RecordAdmin):
    deletable = False
    list_display = ["service", "from_revision", "to_revision", "phase", "step", "created", "finished_at"]
    list_filter = ["phase"]
    search_fields = ["service__name", "service__tenant__slug", "reason"]
    inlines = [RolloutDecisionInline]


@admin.register(RolloutDecision)
class RolloutDecisionAdmin(RecordAdmin):
    deletable = False
    list_display = ["time", "service", "step", "weight", "verdict", "action"]
    list_filter = ["verdict", "action"]
    search_fields = ["service__name", "service__tenant__slug", "reason"]
    date_hierarchy = "time"


@admin.register(StableRevision)
class StableRevisionAdmin(RecordAdmin):
    deletable = False
    list_display = ["service", "revision", "updated"]
    search_fields = ["service__name", "service__tenant__slug"]
