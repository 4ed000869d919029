"""Serializers of the what-if lab: traces (uploaded as a file), runs (started with a service, an optional trace
and alternatives) and their results."""

from __future__ import annotations

from rest_framework import serializers

from apps.core.api.serializers import AsciiPrimaryKeyRelatedField, RefusesNul
from apps.serving.models import InferenceService
from apps.tenancy.models import Tenant
from apps.whatif.apply import gpu_prices, with_costs
from apps.whatif.models import FORMAT_CHOICES, Advice, Calibration, Run, Trace
from apps.whatif.scenarios import MAX_ALTERNATIVES


class TraceSerializer(serializers.ModelSerializer):
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Trace
        fields = ["id", "tenant", "name", "format", "size_bytes", "requests", "duration_s", "summary", "created"]
        read_only_fields = fields


class TraceUploadSerializer(RefusesNul, serializers.Serializer):
    """A multipart upload: the file, its format, a name, and the tenant it is for."""

    tenant = serializers.SlugRelatedField(slug_field="slug", queryset=Tenant.objects.all())
    name = serializers.CharField(max_length=120)
    format = serializers.ChoiceField(choices=FORMAT_CHOICES)
    file = serializers.FileField(help_text="The trace file; bad rows are named by line and column (400).")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        if request is not None:  # another tenant's slug is refused like an unknown one
            self.fields["tenant"].queryset = Tenant.objects.restrict(request.user)


class RunSerializer(RefusesNul, serializers.ModelSerializer):
    service = AsciiPrimaryKeyRelatedField(queryset=InferenceService.objects.all())
    trace = AsciiPrimaryKeyRelatedField(queryset=Trace.objects.all(), required=False, allow_null=True,
                                        help_text="An uploaded trace of the service's tenant; null or left out: "
                                                  "the service's recorded load of the last hour.")
    alternatives = serializers.ListField(
        child=serializers.DictField(), required=False, allow_null=True, max_length=MAX_ALTERNATIVES,
        help_text="Up to 8 alternatives, each a name and changes (gpu_type, gpus_per_replica, min_replicas, "
                  "max_replicas, replicas, engine_settings, autoscaling); null or left out: the lab's defaults.")

    search = serializers.BooleanField(
        required=False, default=False,
        help_text="true: search for the cheapest configurations meeting the SLO (a Pareto front) instead of "
                  "replaying alternatives; the result then has `front`, `chosen` (or null with `reason`) and "
                  "`pruned`, and each front row can be applied by its name.")

    class Meta:
        model = Run
        fields = ["id", "service", "trace", "alternatives", "search", "status", "progress", "message",
                  "cancel_requested", "window_start", "window_end", "cpu_budget_s", "created", "started_at",
                  "finished_at"]
        read_only_fields = ["status", "progress", "message", "cancel_requested", "window_start", "window_end",
                            "cpu_budget_s", "created", "started_at", "finished_at"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        if request is not None:  # another tenant's objects are refused like unknown ones
            self.fields["service"].queryset = InferenceService.objects.restrict(request.user)
            self.fields["trace"].queryset = Trace.objects.restrict(request.user)


class CalibrationSerializer(serializers.ModelSerializer):
    class Meta:
        model = Calibration
        fields = ["id", "service", "run", "created", "window_start", "window_end", "predicted", "observed",
                  "errors_pct"]
        read_only_fields = fields


class RunResultSerializer(RunSerializer):
    """A run with its result: per scenario the figures of the table and the timeline of the plots."""

    result = serializers.SerializerMethodField(
        help_text="requests, duration_s, wall_s, stopped, and scenarios (the current configuration first), each "
                  "with GPU-hours, cost (from the GPU price table), TTFT/ITL quantiles, SLO attainment, "
                  "preemptions, peak replicas, cold starts and its timeline; null until the run finishes.")

    calibration = serializers.SerializerMethodField(
        help_text="On recorded load: the current configuration's replay against what the series showed over the "
                  "same window (TTFT p50/p95, ITL p95, replicas, GPU-hours) with the error in percent.")

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "result", "calibration"]

    def get_calibration(self, run) -> dict | None:
        found = Calibration.objects.filter(run=run).first()
        return None if found is None else CalibrationSerializer(found).data

    def get_result(self, run) -> dict | None:
        if not run.result:
            return None
        return {**run.result, "scenarios": with_costs(run.result["scenarios"], gpu_prices())}


class ApplySerializer(RefusesNul, serializers.Serializer):
    scenario = serializers.CharField(max_length=60, help_text="The name of one of the run's alternatives.")


class AdviceSerializer(serializers.ModelSerializer):
    rule_display = serializers.CharField(source="get_rule_display", read_only=True)

    class Meta:
        model = Advice
        fields = ["id", "service", "rule", "rule_display", "inputs", "alternative", "predicted", "dismissed_at",
                  "created", "updated"]
        read_only_fields = fields
