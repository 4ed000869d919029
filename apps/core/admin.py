"""Admin building blocks: every admin save and delete writes an AuditEntry, and every change page
shows the object's audit history. The audit log itself is read-only."""

from __future__ import annotations

from django.contrib import admin
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from apps.core.audit import record_change, snapshot
from apps.core.audit_display import describe_changes
from apps.core.choices import AuditAction, AuditVia
from apps.core.models import AuditEntry

HISTORY_ROWS = 20


class AuditedModelAdmin(admin.ModelAdmin):
    """A ModelAdmin whose writes are audited (via=admin) and whose change page lists the history."""

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        return [*fields, "audit_history"] if obj is not None else fields

    def get_fields(self, request, obj=None):
        fields = [f for f in super().get_fields(request, obj) if f != "audit_history"]
        return [*fields, "audit_history"] if obj is not None else fields

    @admin.display(description="Audit history")
    def audit_history(self, obj):
        entries = AuditEntry.objects.for_object(obj).select_related("actor")[:HISTORY_ROWS]
        if not entries:
            return "No recorded changes."
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    e.time.strftime("%Y-%m-%d %H:%M:%S"),
                    e.actor_repr or "system",
                    e.action,
                    e.via,
                    render_to_string("audit/changes.html", {"changes": describe_changes(e)}),
                )
                for e in entries
            ),
        )
        link = reverse("admin:core_auditentry_changelist") + f"?object_id={obj.pk}"
        return format_html(
            "<table><tr><th>When</th><th>Who</th><th>Action</th><th>Via</th>"
            "<th>Change (before → after)</th></tr>{}</table>"
            '<p><a href="{}">All entries</a></p>',
            rows,
            link,
        )

    def save_model(self, request, obj, form, change):
        before = snapshot(type(obj).objects.get(pk=obj.pk)) if change else None
        super().save_model(request, obj, form, change)
        self._audit_before = before

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        # After related objects are saved, so the snapshot includes them.
        record_change(
            actor=request.user,
            obj=form.instance,
            action=AuditAction.UPDATE if change else AuditAction.CREATE,
            via=AuditVia.ADMIN,
            before=getattr(self, "_audit_before", None),
        )

    def delete_model(self, request, obj):
        record_change(actor=request.user, obj=obj, action=AuditAction.DELETE, via=AuditVia.ADMIN, before=snapshot(obj))
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self.delete_model(request, obj)


class RecordAdmin(admin.ModelAdmin):
    """A record the product writes and people only read: nobody adds or changes one in the admin, and it is
    deleted only where `deletable` says so (observations may go; history may not)."""

    deletable = True

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return self.deletable and super().has_delete_permission(request, obj)


@admin.register(AuditEntry)
class AuditEntryAdmin(RecordAdmin):
    deletable = False
    list_display = ["time", "actor_repr", "action", "via", "content_type", "object_repr", "tenant"]
    list_filter = ["action", "via", "content_type", "tenant"]
    search_fields = ["object_repr", "actor_repr", "object_id"]
    date_hierarchy = "time"
    list_select_related = ["content_type", "tenant"]
