"""Rollouts and their decisions in the admin: records, read-only (the controller and the actions write them),
with the four actions people take (pause, resume, promote now, abort) through the same audited `act` as the
portal and the API."""

from django.contrib import admin, messages

from apps.core.admin import RecordAdmin
from apps.core.choices import AuditVia
from apps.rollouts.actions import InvalidRolloutState, act
from apps.rollouts.models import Rollout, RolloutDecision, StableRevision

DONE = {"pause": "paused", "resume": "resumed", "promote": "canary promoted", "abort": "aborted"}


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
    actions = ["pause", "resume", "promote", "abort"]

    def _act(self, request, queryset, name: str) -> None:
        for rollout in queryset.select_related("service__tenant"):
            try:
                act(rollout.service, name, actor=request.user, via=AuditVia.ADMIN)
            except InvalidRolloutState as exc:
                self.message_user(request, str(exc), messages.ERROR)
            else:
                self.message_user(request, f"The rollout of {rollout.service}: {DONE[name]}.", messages.SUCCESS)

    @admin.action(description="Pause the selected rollouts")
    def pause(self, request, queryset):
        self._act(request, queryset, "pause")

    @admin.action(description="Resume the selected rollouts")
    def resume(self, request, queryset):
        self._act(request, queryset, "resume")

    @admin.action(description="Promote the selected rollouts' canaries now")
    def promote(self, request, queryset):
        self._act(request, queryset, "promote")

    @admin.action(description="Abort the selected rollouts (back to the stable revision)")
    def abort(self, request, queryset):
        self._act(request, queryset, "abort")


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
