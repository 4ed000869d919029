"""Admin of the catalog."""

from django.contrib import admin

from apps.catalog.models import Adapter, Model, Runtime, TenantImageRegistry
from apps.core.admin import AuditedModelAdmin

PLATFORM_OR_TENANT = ("tenant", admin.RelatedOnlyFieldListFilter)


@admin.register(Model)
class ModelAdmin(AuditedModelAdmin):
    list_display = ["name", "tenant", "parameters_billions", "layers", "kv_heads", "max_context", "dtype", "kv_layout"]
    list_filter = ["dtype", PLATFORM_OR_TENANT, ("tenant", admin.EmptyFieldListFilter)]
    search_fields = ["name", "display_name", "source_uri"]
    list_select_related = ["tenant"]
    readonly_fields = ["created", "updated"]


@admin.register(Adapter)
class AdapterAdmin(AuditedModelAdmin):
    list_display = ["name", "tenant", "base_model", "rank"]
    list_filter = [PLATFORM_OR_TENANT, "base_model"]
    search_fields = ["name", "source_uri"]
    list_select_related = ["tenant", "base_model"]
    readonly_fields = ["created", "updated"]


@admin.register(Runtime)
class RuntimeAdmin(AuditedModelAdmin):
    list_display = ["name", "tenant", "engine", "image", "tag"]
    list_filter = ["engine", PLATFORM_OR_TENANT]
    search_fields = ["name", "image", "tag"]
    list_select_related = ["tenant"]
    readonly_fields = ["created", "updated"]


@admin.register(TenantImageRegistry)
class TenantImageRegistryAdmin(AuditedModelAdmin):
    """Staff allow a tenant extra registries for its private runtimes (on top of IMAGE_REGISTRIES)."""

    list_display = ["tenant", "prefix"]
    list_filter = [("tenant", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["prefix", "tenant__slug"]
    list_select_related = ["tenant"]
