"""Stored what-if lab objects: a tenant's uploaded traces, and runs (a load replayed against a service's
configuration and alternatives by a worker) with their progress and results."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models

from apps.core.access import restricted, staff_only, tenant_owned
from apps.core.models import TimestampedModel
from apps.serving.choices import GpuType
from capacity.traces import FORMATS

# The parser's formats (one list), labelled for people.
FORMAT_LABELS = {"azure": "Azure LLM inference trace (CSV)", "burstgpt": "BurstGPT (CSV)",
                 "jsonl": "JSONL {timestamp, prompt_tokens, output_tokens, prefix_id?}"}
FORMAT_CHOICES = [(name, FORMAT_LABELS[name]) for name in FORMATS]


class Trace(TimestampedModel):
    """An uploaded load trace, stored as uploaded once it parsed without a bad row (`apps.whatif.uploads`)."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="whatif_traces")
    name = models.CharField(max_length=120)
    format = models.CharField(max_length=16, choices=FORMAT_CHOICES)
    data = models.BinaryField(editable=False)
    size_bytes = models.PositiveBigIntegerField(editable=False)
    requests = models.PositiveIntegerField(editable=False)
    duration_s = models.FloatField(editable=False)
    summary = models.JSONField(default=dict, editable=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")

    objects = restricted(tenant_owned("tenant"))
    AUDIT_REDACTED_FIELDS = ("data",)  # the upload itself (megabytes) stays out of the audit entry

    class Meta:
        ordering = ["-created"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="whatif_trace_name_unique")]

    def __str__(self) -> str:
        return f"{self.tenant}/{self.name}"

    def clean(self) -> None:
        super().clean()
        if self.tenant_id and self.name:
            clash = Trace.objects.filter(tenant_id=self.tenant_id, name=self.name).exclude(pk=self.pk)
            if clash.exists():
                raise ValidationError({"name": ValidationError("The tenant has a trace of this name.", code="unique")})

    def audit_extra(self) -> dict:
        return {"format": self.format, "requests": self.requests, "size_bytes": self.size_bytes}


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    STOPPED = "stopped", "Stopped (over its CPU budget)"
    CANCELLED = "cancelled", "Cancelled"
    FAILED = "failed", "Failed"


FINISHED = (RunStatus.SUCCEEDED, RunStatus.STOPPED, RunStatus.CANCELLED, RunStatus.FAILED)


class Run(TimestampedModel):
    """One what-if run: a load (the service's recorded window, or an uploaded trace of its tenant) replayed
    against the service's current configuration and up to 8 alternatives by a worker."""

    service = models.ForeignKey("serving.InferenceService", on_delete=models.CASCADE, related_name="whatif_runs")
    trace = models.ForeignKey(Trace, null=True, blank=True, on_delete=models.PROTECT, related_name="runs",
                              help_text="An uploaded trace of the service's tenant; none: the recorded load.")
    window_start = models.DateTimeField(null=True, editable=False)
    window_end = models.DateTimeField(null=True, editable=False)
    alternatives = models.JSONField(null=True, blank=True,
                                    help_text="Up to 8 alternatives; none: the lab's default ones.")
    search = models.BooleanField(default=False, help_text="A search for the cheapest configurations meeting the "
                                                          "SLO (apps.whatif.search) instead of alternatives.")
    cpu_budget_s = models.FloatField(editable=False)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED, editable=False)
    progress = models.FloatField(default=0.0, editable=False)
    message = models.TextField(blank=True, editable=False)
    cancel_requested = models.BooleanField(default=False, editable=False)
    started_at = models.DateTimeField(null=True, editable=False)
    finished_at = models.DateTimeField(null=True, editable=False)
    result = models.JSONField(null=True, editable=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")

    objects = restricted(tenant_owned("service__tenant"))
    AUDIT_REDACTED_FIELDS = ("result",)  # the scenarios' timelines stay out of the audit entry

    class Meta:
        ordering = ["-created"]
        indexes = [models.Index(fields=["service", "-created"], name="whatif_run_service_idx")]

    def __str__(self) -> str:
        return f"what-if #{self.pk} of {self.service}"

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def audit_extra(self) -> dict:
        return {"service": str(self.service), "trace": self.trace_id, "status": self.status}


class GpuPrice(TimestampedModel):
    """What one GPU of a type costs per hour: the lab's cost per million tokens. Platform operators edit the
    table (admin); a GPU type without a row has no cost shown."""

    gpu_type = models.CharField(max_length=32, choices=GpuType.choices, unique=True)
    usd_per_gpu_hour = models.DecimalField(max_digits=8, decimal_places=4,
                                           validators=[MinValueValidator(Decimal("0"))])

    objects = restricted(staff_only("platform-wide prices the operators set; the lab reads them for everyone"))

    class Meta:
        ordering = ["gpu_type"]

    def __str__(self) -> str:
        return f"{self.gpu_type}: ${self.usd_per_gpu_hour}/GPU-hour"


class Calibration(models.Model):
    """The lab's replay of a service's actual configuration over a recorded window against what was observed
    there (`apps.whatif.calibration`), one per run on recorded load: the service's record of how far to trust
    the lab."""

    service = models.ForeignKey("serving.InferenceService", on_delete=models.CASCADE, related_name="+")
    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="calibration")
    created = models.DateTimeField(auto_now_add=True)
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    predicted = models.JSONField()
    observed = models.JSONField()
    errors_pct = models.JSONField(help_text="(predicted - observed) / observed in percent, per figure.")

    objects = restricted(tenant_owned("service__tenant", writers=frozenset()))

    class Meta:
        ordering = ["-created"]
        indexes = [models.Index(fields=["service", "-created"], name="whatif_calibration_service_idx")]

    def __str__(self) -> str:
        return f"calibration of {self.service} by run {self.run_id}"


class EngineFit(models.Model):
    """Step-time coefficients fitted to a service's observed latencies (`manage.py calibrate`,
    `apps.whatif.fit`). The latest applied one is the physics the lab replays the service with."""

    service = models.ForeignKey("serving.InferenceService", on_delete=models.CASCADE, related_name="+")
    created = models.DateTimeField(auto_now_add=True)
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    coefficients = models.JSONField(help_text="prefill_flops_fraction, decode_bandwidth_fraction, step_overhead_ms.")
    figures = models.JSONField(help_text="Intervals used and the fitted model's mean error on them.")
    applied = models.BooleanField(default=False)

    objects = restricted(tenant_owned("service__tenant", writers=frozenset()))

    class Meta:
        ordering = ["-created"]
        indexes = [models.Index(fields=["service", "-created"], name="whatif_enginefit_service_idx")]

    def __str__(self) -> str:
        return f"engine fit of {self.service} at {self.created:%Y-%m-%d %H:%M}"


class AdviceRule(models.TextChoices):
    FP8_KV = "fp8_kv", "fp8 KV cache under KV pressure"
    SMALLER_BATCH = "smaller_batch", "Fewer concurrent sequences when ITL misses its SLO"
    FEWER_REPLICAS = "fewer_replicas", "Fewer replicas when the SLO holds with headroom"
    CHEAPER_GPU = "cheaper_gpu", "A cheaper GPU type when the SLO holds with headroom"
    AUTOSCALING_TARGETS = "autoscaling_targets", "Autoscaling targets the recorded load shows as too tight or loose"
    BATCHED_TOKENS = "batched_tokens", "A larger step budget when prefill dominates, a smaller one when ITL misses"
    CPU_KV_TIER = "cpu_kv_tier", "A CPU tier of the KV cache when prefixes are reused and the GPU pool is full"
    SPECULATIVE = "speculative", "Speculative decoding on at low concurrency a replica, off at high"


class Advice(TimestampedModel):
    """One tuning suggestion for a service from its live telemetry (`apps.whatif.advice`), kept only while the
    lab confirms it (a predicted effect of at least 5 % on the rule's figure). Dismissing it is audited."""

    service = models.ForeignKey("serving.InferenceService", on_delete=models.CASCADE, related_name="whatif_advice")
    rule = models.CharField(max_length=32, choices=AdviceRule.choices)
    inputs = models.JSONField(help_text="The rule's inputs over the window it read.")
    alternative = models.JSONField(help_text="The suggested change, as a what-if alternative.")
    predicted = models.JSONField(help_text="The lab's replay: the figure, current and suggested values, effect %.")
    dismissed_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = restricted(tenant_owned("service__tenant"))

    class Meta:
        ordering = ["service", "rule"]
        constraints = [models.UniqueConstraint(fields=["service", "rule"], name="whatif_advice_unique")]

    def __str__(self) -> str:
        return f"{self.service}: {self.get_rule_display()}"
