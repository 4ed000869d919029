"""Admin of services. Pools are inline; the whole spec (service, pools, adapters) is validated at
once by the pool formset, and saving goes through `apps.serving.actions` like every other door."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError

from apps.core.admin import AuditedModelAdmin, RecordAdmin
from apps.core.choices import AuditVia
from apps.serving.actions import ServiceDeleting, request_deletion, rollback, save_service
from apps.serving.models import EDITABLE_FIELDS, POOL_SPEC_FIELDS, STATUS_FIELDS, InferenceService, Pool, Revision
from apps.serving.rendering.spec import PoolSpec
from apps.serving.revisions import RollbackRefused
from apps.serving.validation import service_errors

STATUS_ADMIN_FIELDS = [*STATUS_FIELDS, "version", "last_reconciled_at"]


class InferenceServiceAdminForm(forms.ModelForm):
    class Meta:
        model = InferenceService
        fields = list(EDITABLE_FIELDS)

    def clean(self):
        cleaned = super().clean()
        # The pool formset validates the whole spec once the pools are known (see PoolFormSet.clean).
        self.instance._admin_adapters = list(cleaned.get("adapters") or [])
        return cleaned

    def _post_clean(self):
        self.instance._defer_spec_validation = True
        try:
            super()._post_clean()
        finally:
            self.instance._defer_spec_validation = False


class PoolFormSet(forms.BaseInlineFormSet):
    def clean(self):
        super().clean()
        if any(self.errors):
            return
        service = self.instance
        pools = [f.instance for f in self.forms if f.cleaned_data and not f.cleaned_data.get("DELETE")]
        errors = service_errors(service, pools, getattr(service, "_admin_adapters", []))
        if errors:
            raise ValidationError([f"{field}: {message}" for field, msgs in errors.items() for message in msgs])
        service.stage_spec(pools=pools)
        service.fill_autoscaling_defaults()


class PoolInline(admin.TabularInline):
    model = Pool
    formset = PoolFormSet
    extra = 0
    min_num = 1
    fields = ["role", *POOL_SPEC_FIELDS, "ready_replicas"]
    readonly_fields = ["ready_replicas"]


@admin.register(InferenceService)
class InferenceServiceAdmin(AuditedModelAdmin):
    form = InferenceServiceAdminForm
    inlines = [PoolInline]
    list_display = [
        "name",
        "tenant",
        "cluster",
        "model",
        "runtime",
        "deployment_mode",
        "phase",
        "ready_replicas",
        "generation",
        "observed_generation",
    ]
    list_filter = ["phase", "deployment_mode", "routing_policy", "runtime__engine", "tenant", "cluster"]
    search_fields = ["name", "tenant__slug", "model__name", "uid"]
    list_select_related = ["tenant", "cluster", "model", "runtime"]
    readonly_fields = STATUS_ADMIN_FIELDS
    filter_horizontal = ["adapters"]

    def get_fields(self, request, obj=None):
        fields = list(InferenceServiceAdminForm.Meta.fields)
        if obj is not None:
            fields += [*STATUS_ADMIN_FIELDS, "audit_history"]
        return fields

    def save_model(self, request, obj, form, change):
        """Deferred to save_related: the service, its pools and adapters are saved together."""

    def save_formset(self, request, form, formset, change):
        """Pools are saved by save_service in save_related."""

    def save_related(self, request, form, formsets, change):
        for formset in formsets:
            # The admin's change message reads these; save_service did the saving.
            formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []
        pool_forms = [f for fs in formsets if fs.model is Pool for f in fs.forms]
        pools = [
            PoolSpec(**{name: f.cleaned_data[name] for name in ("role", *POOL_SPEC_FIELDS)})
            for f in pool_forms
            if f.cleaned_data and not f.cleaned_data.get("DELETE")
        ]
        save_service(
            form.instance,
            pools=pools,
            adapters=list(form.cleaned_data.get("adapters") or []),
            actor=request.user,
            via=AuditVia.ADMIN,
        )

    def delete_model(self, request, obj):
        # Like the API: mark for deletion, the reconciler removes the cluster objects and then the row.
        request_deletion(obj, actor=request.user, via=AuditVia.ADMIN)

    def delete_queryset(self, request, queryset):
        for obj in queryset.filter(deletion_requested_at__isnull=True):
            self.delete_model(request, obj)


@admin.register(Revision)
class RevisionAdmin(RecordAdmin):
    deletable = False
    """Revisions are history (read only); the one action makes a selected revision current again."""

    list_display = ["service", "number", "created", "actor_repr", "restored_from", "audit_entry"]
    list_filter = ["service__tenant"]
    search_fields = ["service__name", "service__tenant__slug"]
    list_select_related = ["service__tenant", "audit_entry"]
    readonly_fields = ["service", "number", "created", "actor", "actor_repr", "audit_entry", "restored_from", "spec"]
    actions = ["roll_back"]

    @admin.action(description="Roll back to the selected revision (make it current again)")
    def roll_back(self, request, queryset):
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one revision to roll back to.", messages.ERROR)
            return
        revision = queryset.select_related("service").get()
        try:
            new = rollback(revision.service, revision.number, actor=request.user, via=AuditVia.ADMIN)
        except (RollbackRefused, ServiceDeleting) as exc:
            self.message_user(request, str(exc), messages.ERROR)
        except ValidationError as exc:
            self.message_user(request, "; ".join(exc.messages), messages.ERROR)
        else:
            self.message_user(request, f"{revision.service} now runs revision {revision.number}'s spec "
                                       f"(as revision {new.number}).", messages.SUCCESS)
