"""Admin of clusters. Credentials are write-only: the form never renders a stored value; leaving a
field blank keeps it, and "clear" removes it."""

from __future__ import annotations

from django import forms
from django.contrib import admin

from apps.clusters.models import Cluster, GpuNode
from apps.core.admin import AuditedModelAdmin, RecordAdmin

CREDENTIALS = ("bearer_token", "kubeconfig", "ca_bundle")


class ClusterAdminForm(forms.ModelForm):
    bearer_token = forms.CharField(required=False, widget=forms.PasswordInput(render_value=False))
    kubeconfig = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 4}))
    ca_bundle = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 4}))
    clear_credentials = forms.MultipleChoiceField(
        required=False, choices=[(c, c) for c in CREDENTIALS], widget=forms.CheckboxSelectMultiple
    )

    class Meta:
        model = Cluster
        fields = ["name", "description", "api_url", *CREDENTIALS, "in_cluster", "insecure_simulator", "has_gateway",
                  "kueue_installed", "node_model_volume",
                  "prometheus_url", "api_server_cidrs", "model_egress_cidrs", "open_to_all_tenants", "tenants"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._stored = {name: getattr(self.instance, name) or "" for name in CREDENTIALS}
        for name in CREDENTIALS:
            self.initial[name] = ""
            state = "set: leave blank to keep" if self._stored[name] else "not set"
            self.fields[name].help_text = f"Write-only ({state})."

    def clean(self):
        cleaned = super().clean()
        clear = set(cleaned.get("clear_credentials") or ())
        for name in CREDENTIALS:
            if name in clear:
                cleaned[name] = ""
            elif not cleaned.get(name):
                cleaned[name] = self._stored[name]
        return cleaned


class GpuNodeInline(admin.TabularInline):
    model = GpuNode
    extra = 0
    can_delete = False
    readonly_fields = ["name", "gpu_product", "gpu_count", "allocatable", "allocated", "ready", "observed_at"]
    fields = readonly_fields

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Cluster)
class ClusterAdmin(AuditedModelAdmin):
    form = ClusterAdminForm
    list_display = ["name", "api_url", "in_cluster", "insecure_simulator", "has_gateway", "node_model_volume",
                    "last_seen_at"]
    list_filter = ["insecure_simulator", "has_gateway"]
    search_fields = ["name", "api_url", "description"]
    readonly_fields = ["last_seen_at", "created", "updated"]
    inlines = [GpuNodeInline]
    filter_horizontal = ["tenants"]

    def get_fields(self, request, obj=None):
        fields = [*ClusterAdminForm.Meta.fields, "clear_credentials"]
        if obj is not None:
            fields += ["last_seen_at", "created", "updated", "audit_history"]
        return fields


@admin.register(GpuNode)
class GpuNodeAdmin(RecordAdmin):
    """Observed by the inventory worker; read-only here."""

    list_display = ["name", "cluster", "gpu_product", "gpu_count", "allocatable", "allocated", "ready"]
    list_filter = ["cluster", "gpu_product", "ready"]
    search_fields = ["name", "gpu_product"]
    list_select_related = ["cluster"]
