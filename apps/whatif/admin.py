"""The what-if lab in the admin: the GPU price table operators edit (audited), runs and traces read-only."""

from django.contrib import admin

from apps.core.admin import AuditedModelAdmin, RecordAdmin
from apps.whatif.models import GpuPrice, Run, Trace


@admin.register(GpuPrice)
class GpuPriceAdmin(AuditedModelAdmin):
    list_display = ["gpu_type", "usd_per_gpu_hour", "updated"]
    list_editable = ["usd_per_gpu_hour"]


@admin.register(Run)
class RunAdmin(RecordAdmin):
    list_display = ["id", "service", "trace", "status", "progress", "created", "finished_at"]
    list_filter = ["status"]
    search_fields = ["service__name", "service__tenant__slug"]
    exclude = ["result"]


@admin.register(Trace)
class TraceAdmin(RecordAdmin):
    list_display = ["name", "tenant", "format", "requests", "duration_s", "size_bytes", "created"]
    list_filter = ["format"]
    search_fields = ["name", "tenant__slug"]
