"""Inference keys (a tenant's credential for the gateway), per-tenant gateway limits, and metered usage.

An inference key is not an API token: it calls models through the gateway and cannot manage anything.
It is hashed the way API tokens are (one SHA-256 of 256 random bits) so the gateway's snapshot holds
only hashes.
"""

from __future__ import annotations

import secrets
from datetime import timedelta

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import BrinIndex
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from apps.core.access import restricted, staff_only, tenant_owned
from apps.core.models import TimestampedModel
from apps.tenancy.models import TOKEN_PREFIX_LENGTH, hash_token
from gateway import batch_vocab as bv
from gateway.door import QUEUE_FULL, QUEUE_TIMEOUT
from gateway.fairness import DEFAULT_BAND, DEFAULT_WEIGHT, HIGHEST_BAND, LOWEST_BAND
from gateway.metering import TEXT_CHARS

# The marker lets secret scanners and people tell an inference key from an API token at a glance.
KEY_MARKER = "sk-"
LIMIT_HELP = "Empty means no limit of this kind at this level."


def limit_field(help_text: str) -> models.PositiveIntegerField:
    # Zero would be a key that can never be used; revoking says that more honestly.
    return models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)], help_text=f"{help_text} {LIMIT_HELP}"
    )


class Limits(models.Model):
    """The four limits a key and a tenant both carry; the gateway enforces the stricter of the two."""

    rpm = limit_field("Requests per minute.")
    tpm = limit_field("Tokens (prompt and completion) per minute.")
    concurrency = limit_field("Requests in flight at once.")
    monthly_token_budget = limit_field("Tokens per calendar month (UTC).")

    class Meta:
        abstract = True


class InferenceKey(TimestampedModel, Limits):
    """A bearer key for the gateway. Only its SHA-256 is stored; the plaintext is shown once."""

    AUDIT_REDACTED_FIELDS = ("key_hash",)

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="inference_keys")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=len(KEY_MARKER) + TOKEN_PREFIX_LENGTH, editable=False)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    services = models.ManyToManyField(
        "serving.InferenceService", blank=True, related_name="+",
        help_text="The services the key may call; none means every service of its tenant.",
    )
    issued_at = models.DateTimeField(default=timezone.now, editable=False)
    expires_at = models.DateTimeField(help_text="Required; at most TOKEN_MAX_DAYS after the secret was issued.")
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    priority = models.IntegerField(
        default=DEFAULT_BAND, validators=[MinValueValidator(LOWEST_BAND)],
        help_text=f"The key's priority band at the gateway, higher first ({LOWEST_BAND} is batch and best-effort); "
                  "at most the tenant's highest band. A request may lower it (x-priority), never raise it.")

    # Members see their tenants' keys (never a secret: only the prefix and the hash are stored);
    # owners and operators change them.
    objects = restricted(tenant_owned("tenant"))

    class Meta:
        ordering = ["-created"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="gateway_key_name_unique")]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"

    def new_secret(self, *, expires_at=None) -> str:
        """A fresh secret (issue or rotate) and an expiry, by default the cap; returns the plaintext."""
        plaintext = KEY_MARKER + secrets.token_urlsafe(32)
        self.prefix = plaintext[: len(KEY_MARKER) + TOKEN_PREFIX_LENGTH]
        self.key_hash = hash_token(plaintext)
        self.issued_at = timezone.now()
        self.expires_at = expires_at or self.latest_expiry
        return plaintext

    @property
    def latest_expiry(self):
        return self.issued_at + timedelta(days=settings.TOKEN_MAX_DAYS)

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        if self.expires_at is not None and self.expires_at > self.latest_expiry:
            raise ValidationError({"expires_at": ValidationError(
                "A key may live at most %(days)d days from when its secret was issued (TOKEN_MAX_DAYS); "
                "rotate it for a new period.", code="max_lifetime", params={"days": settings.TOKEN_MAX_DAYS})})
        if self.tenant_id and self.name:
            clash = InferenceKey.objects.filter(tenant_id=self.tenant_id, name=self.name).exclude(pk=self.pk)
            if clash.exists():
                raise ValidationError({"name": ValidationError("The tenant has a key of this name.", code="unique")})
        if self.tenant_id and self.priority is not None and self.priority > (highest := highest_band(self.tenant_id)):
            raise ValidationError({"priority": ValidationError(
                "The tenant's highest band is %(highest)d (a staff setting: tenant limits).", code="above_tenant_band",
                params={"highest": highest})})

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    @property
    def is_active(self) -> bool:
        return not self.is_revoked and self.expires_at > timezone.now()

    def audit_extra(self) -> dict:
        return {"services": sorted(self.services.values_list("pk", flat=True))} if self.pk else {}


def highest_band(tenant_id) -> int:
    """The highest band the tenant's keys may have: its limits' `max_priority`, else the default band."""
    limits = TenantLimits.objects.filter(tenant_id=tenant_id).values_list("max_priority", flat=True)
    return next(iter(limits), DEFAULT_BAND)


class TenantLimits(TimestampedModel, Limits):
    """Limits that bound all of a tenant's keys together; set by platform staff, like the GPU quota."""

    tenant = models.OneToOneField("tenancy.Tenant", on_delete=models.CASCADE, related_name="gateway_limits")
    max_priority = models.IntegerField(
        default=DEFAULT_BAND, validators=[MinValueValidator(LOWEST_BAND), MaxValueValidator(HIGHEST_BAND)],
        help_text="The highest priority band the tenant's keys may choose.")
    fair_share_weight = models.PositiveIntegerField(
        default=DEFAULT_WEIGHT, validators=[MinValueValidator(1), MaxValueValidator(1000)],
        help_text="The tenant's share of a saturated service against other tenants in the same band (2 is twice "
                  "the default's).")

    # Members see their tenant's limits; only staff change them, like the GPU quota.
    objects = restricted(tenant_owned("tenant", writers=frozenset()))

    class Meta:
        ordering = ["tenant__slug"]
        verbose_name_plural = "tenant limits"

    def __str__(self) -> str:
        return f"limits of {self.tenant}"


class Usage(models.Model):
    """The counts shared by one request's row and an hour's rollup."""

    prompt_tokens = models.PositiveIntegerField(default=0)
    cached_tokens = models.PositiveIntegerField(default=0, help_text="prompt_tokens_details.cached_tokens")
    completion_tokens = models.PositiveIntegerField(default=0)

    class Meta:
        abstract = True


class UsageRow(Usage):
    """One request as the gateway metered it. Keys and services are kept as plain ids so a row outlives
    a deleted key (the bill does not change when the key goes) and so the gateway can COPY rows without
    the database checking foreign keys on every batch."""

    at = models.DateTimeField(db_index=False)
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    key_id = models.BigIntegerField(null=True)
    service_id = models.BigIntegerField(null=True)
    # The gateway cuts what it writes there to these bounds.
    model = models.CharField(max_length=TEXT_CHARS["model"],
                             help_text="The model field as asked: service, served name or adapter.")
    pod = models.CharField(max_length=TEXT_CHARS["pod"], blank=True)
    status = models.PositiveSmallIntegerField()
    ttft_ms = models.FloatField(null=True)
    duration_ms = models.FloatField()
    streamed = models.BooleanField(default=False)
    disconnected = models.BooleanField(default=False)
    added_ms = models.FloatField(null=True, help_text="Time spent in the gateway before the answer started, less "
                                 "the wait on the upstream (forwarded requests only).")
    # The prompt's prefix blocks as the gateway hashed them (gateway/prefix.py), for the service's reuse curve.
    prompt_chars = models.PositiveIntegerField(null=True, help_text="Characters of the prompt's text.")
    prefix_blocks = ArrayField(models.IntegerField(), null=True, help_text="Chained hashes of the prompt's "
                               "64-character chunks (gateway/prefix.py).")
    # Null, not "", for an interactive request: a spool segment of an older gateway lacks the column (null).
    batch_id = models.CharField(max_length=bv.ID_CHARS, null=True, blank=True,  # noqa: DJ001
                                help_text="The batch whose line this request was; empty for an interactive one.")
    queued_ms = models.FloatField(null=True, help_text="Time waited in the door's queue (requests that waited only).")
    # Null on rows spooled by a gateway older than the column (a spool's rows lack the columns added since).
    shed = models.CharField(max_length=20, blank=True, null=True,  # noqa: DJ001
                            choices=[(r, r) for r in (QUEUE_FULL, QUEUE_TIMEOUT)],
                            help_text="Why the door's queue answered 429, if it did.")

    # Members read their tenant's usage; only the gateway writes it.
    objects = restricted(tenant_owned("tenant", writers=frozenset()))

    class Meta:
        # BRIN on `at` for the fleet page's last minutes over every tenant: rows arrive in time order, so a
        # few pages of block ranges find them where a B-tree would grow with every row.
        indexes = [models.Index(fields=["tenant", "at"], name="gateway_usage_tenant_at"),
                   BrinIndex(fields=["at"], name="gateway_usage_at_brin")]

    def __str__(self) -> str:
        return f"{self.model} {self.status} at {self.at:%Y-%m-%d %H:%M:%S}"


class UsageBatch(models.Model):
    """A batch of usage rows the gateway committed from its disk spool, recorded in the batch's own
    transaction: replaying a spool segment whose rows were committed just before a crash (the file not yet
    deleted) finds its marker and writes nothing. The gateway deletes a marker once its segment file is gone;
    markers a crash left behind are pruned with the hourly rows."""

    id = models.UUIDField(primary_key=True)
    at = models.DateTimeField()

    objects = restricted(staff_only("the gateway's record of a committed spool segment"))

    def __str__(self) -> str:
        return f"usage batch {self.id}"


class UsageHour(Usage):
    """The hourly rollup of UsageRow per (tenant, key, service, model)."""

    hour = models.DateTimeField()
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    key_id = models.BigIntegerField(null=True)
    service_id = models.BigIntegerField(null=True)
    model = models.CharField(max_length=200)
    batch = models.BooleanField(default=False, help_text="Lines of batches, apart from interactive requests.")
    requests = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0, help_text="Answers of 500 and above.")
    rate_limited = models.PositiveIntegerField(default=0, help_text="Answers of 429.")
    ttft_p50_ms = models.FloatField(null=True, help_text="Median time to first token seen at the gateway.")
    ttft_p95_ms = models.FloatField(null=True)

    # Members read their tenant's usage; only the gateway writes it.
    objects = restricted(tenant_owned("tenant", writers=frozenset()))

    class Meta:
        ordering = ["-hour"]
        constraints = [models.UniqueConstraint(
            fields=["hour", "tenant", "key_id", "service_id", "model", "batch"], name="gateway_usage_hour_unique",
            nulls_distinct=False)]

    def __str__(self) -> str:
        return f"{self.model} in the hour of {self.hour:%Y-%m-%d %H:00}"


class Upstream(models.Model):
    """Where the gateway sends a service's requests, as the last telemetry cycle of its cluster saw them:
    its ready router pods when the service is routed, else its ready engine pods, as `ip:port`. The
    snapshot carries them to the gateway, which connects to them directly (docs/gateway.md)."""

    service = models.OneToOneField("serving.InferenceService", on_delete=models.CASCADE, primary_key=True,
                                   related_name="+")
    routed = models.BooleanField(default=False)
    # Ready pods of its engine pools (behind the router of a routed service): 0 is a service to wake.
    ready_engines = models.PositiveIntegerField(default=0)
    # [{"pod": name, "address": "ip:port"}], sorted by pod name
    endpoints = models.JSONField(default=list, blank=True)
    # Its ready engine pods that serve the API (also when routed), as endpoints are: the ones a wake reaches.
    engines = models.JSONField(default=list, blank=True)
    # Put to sleep (vLLM's sleep mode, workers/sleep.py) at this level and time; 0 / null: not by us since.
    sleep_level = models.PositiveSmallIntegerField(default=0)
    slept_at = models.DateTimeField(null=True, blank=True)
    seen_at = models.DateTimeField()

    # Members see their services' upstreams; only the telemetry cycle writes them.
    objects = restricted(tenant_owned("service__tenant", writers=frozenset()))

    def __str__(self) -> str:
        return f"{self.service_id}: {len(self.endpoints)} endpoints"


class BatchStatus(models.TextChoices):
    """A batch's statuses, as OpenAI names them (gateway/batch_vocab.py)."""

    VALIDATING = bv.VALIDATING
    FAILED = bv.FAILED
    IN_PROGRESS = bv.IN_PROGRESS
    FINALIZING = bv.FINALIZING
    COMPLETED = bv.COMPLETED
    EXPIRED = bv.EXPIRED
    CANCELLING = bv.CANCELLING
    CANCELLED = bv.CANCELLED


class File(models.Model):
    """A file of OpenAI's Files API, the tenant's own: a batch's input (JSONL) or the output or errors the
    gateway wrote for a batch. The gateway writes these rows with psycopg (gateway/batch_store.py)."""

    id = models.CharField(max_length=bv.ID_CHARS, primary_key=True)
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    key_id = models.BigIntegerField(null=True, help_text="The inference key that uploaded it (none: the gateway).")
    purpose = models.CharField(max_length=20, choices=[(p, p) for p in bv.PURPOSES])
    filename = models.CharField(max_length=bv.MAX_FILENAME_CHARS)
    bytes = models.PositiveIntegerField()
    lines = models.PositiveIntegerField()
    content = models.BinaryField()
    created_at = models.DateTimeField()

    # Members read their tenant's files; the gateway writes them, and deletes one when a key asks.
    objects = restricted(tenant_owned("tenant", writers=frozenset()))

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["tenant", "created_at"], name="gateway_file_tenant_created")]

    def __str__(self) -> str:
        return f"{self.id} ({self.filename})"


class Batch(models.Model):
    """A batch of OpenAI's Batch API: the lines of its input file run by the gateway's batch runner in the
    lowest band on spare capacity (gateway/batch_runner.py), each metered to `key_id` like any request."""

    id = models.CharField(max_length=bv.ID_CHARS, primary_key=True)
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    key_id = models.BigIntegerField(help_text="The inference key that created it; its lines run as this key.")
    endpoint = models.CharField(max_length=40)
    input_file_id = models.CharField(max_length=bv.ID_CHARS)
    output_file_id = models.CharField(max_length=bv.ID_CHARS, blank=True, default="")
    error_file_id = models.CharField(max_length=bv.ID_CHARS, blank=True, default="")
    completion_window = models.CharField(max_length=10, default=bv.COMPLETION_WINDOW)
    status = models.CharField(max_length=20, choices=BatchStatus.choices, default=BatchStatus.VALIDATING)
    metadata = models.JSONField(null=True, blank=True)
    errors = models.JSONField(null=True, blank=True, help_text="Why the batch failed: [{code, message, line}].")
    total = models.PositiveIntegerField(default=0)
    completed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    cached_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    next_line = models.PositiveIntegerField(default=1, help_text="The first line not run yet (1-based).")
    # The gateway replica running it, until when: another takes it over once the lease lapses.
    claimed_by = models.CharField(max_length=100, blank=True, default="")
    claimed_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    in_progress_at = models.DateTimeField(null=True, blank=True)
    finalizing_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)
    cancelling_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    # Members read their tenant's batches; owners and operators cancel them in the portal.
    objects = restricted(tenant_owned("tenant"))

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "batches"
        indexes = [models.Index(fields=["tenant", "created_at"], name="gateway_batch_tenant_created"),
                   models.Index(fields=["status", "created_at"], name="gateway_batch_status_created")]

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"

    @property
    def done(self) -> int:
        return self.completed + self.failed

    @property
    def percent(self) -> int:
        return round(100 * self.done / self.total) if self.total else 0

    @property
    def active(self) -> bool:
        return self.status in bv.ACTIVE

    @property
    def cancellable(self) -> bool:
        return self.status in bv.CANCELLABLE


class BatchLine(models.Model):
    """One answered line of a running batch, kept until the batch is finalized into its output and error
    files: the runner resumes after the last one kept (another replica too)."""

    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="+")
    line = models.PositiveIntegerField()
    failed = models.BooleanField(default=False)
    body = models.TextField(help_text="The line of the output or error file (JSON).")

    objects = restricted(tenant_owned("batch__tenant", writers=frozenset()))

    class Meta:
        constraints = [models.UniqueConstraint(fields=["batch", "line"], name="gateway_batch_line_unique")]

    def __str__(self) -> str:
        return f"{self.batch_id} line {self.line}"
