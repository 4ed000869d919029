"""Admin of tenants, memberships and API tokens (a new token's plaintext is shown once, as a message)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.forms.models import BaseInlineFormSet
from django.utils import timezone

from apps.core.admin import AuditedModelAdmin
from apps.core.audit import record_change, snapshot
from apps.core.choices import AuditAction, AuditVia, Role
from apps.tenancy.models import LAST_OWNER_MESSAGE, ApiToken, Membership, PriorityClass, Tenant, TenantQueue


class GuardedRemovalAdmin(AuditedModelAdmin):
    """For models whose `validate_removal()` refuses some deletions: their delete page is refused outright, and a
    bulk delete skips them with the model's reason."""

    def has_delete_permission(self, request, obj=None):
        if obj is not None:
            try:
                obj.validate_removal()
            except ValidationError:
                return False
        return super().has_delete_permission(request, obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            try:
                obj.validate_removal()
            except ValidationError as exc:
                messages.error(request, " ".join(exc.messages))
                continue
            self.delete_model(request, obj)


class MembershipInlineFormSet(BaseInlineFormSet):
    """Refuses a tenant form that would delete or demote every owner at once."""

    def clean(self):
        super().clean()
        owners_before = [f for f in self.forms if f.instance.pk and f.initial.get("role") == Role.OWNER]
        owners_after = [
            f for f in self.forms
            if f.cleaned_data and not f.cleaned_data.get("DELETE") and f.cleaned_data.get("role") == Role.OWNER
        ]
        if owners_before and not owners_after:
            raise ValidationError(LAST_OWNER_MESSAGE.format(action="removed or demoted"))


class MembershipInline(admin.TabularInline):
    model = Membership
    formset = MembershipInlineFormSet
    extra = 0
    autocomplete_fields = ["user"]


class TenantQueueInline(admin.StackedInline):
    model = TenantQueue
    extra = 0
    fields = ["cluster", "cohort", "nominal", "borrowing_limit", "lending_limit", "weight"]


@admin.register(Tenant)
class TenantAdmin(AuditedModelAdmin):
    list_display = ["slug", "name", "max_priority_class", "default_priority_class", "created"]
    search_fields = ["slug", "name"]
    readonly_fields = ["created", "updated"]
    inlines = [MembershipInline, TenantQueueInline]


@admin.register(PriorityClass)
class PriorityClassAdmin(GuardedRemovalAdmin):
    list_display = ["name", "value", "preemption_policy", "description"]
    search_fields = ["name"]


@admin.register(TenantQueue)
class TenantQueueAdmin(GuardedRemovalAdmin):
    list_display = ["tenant", "cluster", "cohort", "nominal", "borrowing_limit", "lending_limit", "weight"]
    list_filter = ["cluster", "cohort"]
    search_fields = ["tenant__slug", "cohort"]
    list_select_related = ["tenant", "cluster"]
    autocomplete_fields = ["tenant"]


@admin.register(Membership)
class MembershipAdmin(GuardedRemovalAdmin):
    list_display = ["user", "tenant", "role", "created"]
    list_filter = ["role", "tenant"]
    search_fields = ["user__username", "tenant__slug"]
    list_select_related = ["user", "tenant"]
    autocomplete_fields = ["user", "tenant"]


@admin.register(ApiToken)
class ApiTokenAdmin(AuditedModelAdmin):
    list_display = ["prefix", "name", "user", "tenant", "expires_at", "revoked_at", "last_used_at"]
    list_filter = ["tenant", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["prefix", "name", "user__username"]
    list_select_related = ["user", "tenant"]
    readonly_fields = ["prefix", "last_used_at", "revoked_at", "created"]
    autocomplete_fields = ["user", "tenant"]
    actions = ["revoke"]

    def get_fields(self, request, obj=None):
        base = ["user", "tenant", "name", "expires_at"]
        if obj is None:
            return base
        return [*base, "prefix", "revoked_at", "last_used_at", "created", "audit_history"]

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        if obj is None:
            # Left empty, a new token gets the longest life allowed (TOKEN_MAX_DAYS).
            form.base_fields["expires_at"].required = False
        return form

    def save_model(self, request, obj, form, change):
        if not change:
            plaintext = obj.new_secret(expires_at=obj.expires_at)
            messages.warning(request, f"New token (shown once, store it now): {plaintext}")
        super().save_model(request, obj, form, change)

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request, queryset):
        for token in queryset.filter(revoked_at__isnull=True):
            before = snapshot(token)
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at", "updated"])
            record_change(actor=request.user, obj=token, action=AuditAction.UPDATE, via=AuditVia.ADMIN, before=before)
