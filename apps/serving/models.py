"""Inference services (desired spec plus observed status) and their pools of replicas.

Spec changes go through `apps.serving.actions`, which validates the whole service (pools and
adapters included) with `full_clean()`, bumps `generation`, writes the audit entry and enqueues a
reconcile. Workers write only the status fields (`observed_generation`, `phase`, `conditions`, ...).
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from apps.catalog.choices import DeploymentMode
from apps.catalog.engines import EngineSettings
from apps.core.access import RestrictedQuerySet, restricted, staff_only, tenant_owned
from apps.core.models import TimestampedModel
from apps.core.validators import dns1123_label
from apps.serving.choices import GpuType, Phase, PoolRole, ReconcileResult, RoutingPolicy
from apps.serving.rollout_spec import default_rollout
from apps.serving.validation import service_errors

# Fields whose change is a spec change (bumps generation); pools and adapters are compared too.
SPEC_FIELDS = (
    "cluster_id",
    "model_id",
    "runtime_id",
    "deployment_mode",
    "engine_settings",
    "routing_policy",
    "autoscaling",
    "rollout",
    "priority_class_id",
)
# What a client sets, and what only the control plane writes (shared by the API and the admin).
EDITABLE_FIELDS = (
    "tenant", "name", "cluster", "model", "runtime", "adapters", "deployment_mode", "engine_settings",
    "routing_policy", "autoscaling", "rollout", "priority_class",
)  # fmt: skip
STATUS_FIELDS = (
    "uid", "generation", "observed_generation", "phase", "conditions", "ready_replicas", "endpoint",
    "deletion_requested_at", "admission", "created", "updated",
)  # fmt: skip
POOL_SPEC_FIELDS = (
    "replicas",
    "min_replicas",
    "max_replicas",
    "gpus_per_replica",
    "gpu_type",
    "nodes_per_replica",
)


def default_autoscaling() -> dict:
    return {"autoscaler": "none"}


class InferenceServiceQuerySet(RestrictedQuerySet):
    """Members see their tenants' services."""

    rule = tenant_owned("tenant")

    def with_related(self) -> InferenceServiceQuerySet:
        """Everything a list page renders, in a fixed number of queries."""
        return self.select_related("tenant__default_priority_class", "cluster", "model", "runtime",
                                   "priority_class").prefetch_related("pools", "adapters")

    def gpus_at_max(self) -> int:
        """Sum over these services' pools of max replicas x GPUs per replica x nodes per replica."""
        total = Pool.objects.filter(service__in=self).aggregate(
            gpus=models.Sum(models.F("max_replicas") * models.F("gpus_per_replica") * models.F("nodes_per_replica"))
        )["gpus"]
        return int(total or 0)


class InferenceService(TimestampedModel):
    """A model served on a runtime in one cluster for one tenant: desired spec and observed status."""

    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.PROTECT, related_name="services")
    name = models.CharField(
        max_length=40,
        validators=[dns1123_label],
        help_text="A DNS-1123 label, unique in the tenant; at most 40 characters so role suffixes fit.",
    )
    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.PROTECT, related_name="services")
    model = models.ForeignKey("catalog.Model", on_delete=models.PROTECT, related_name="services")
    runtime = models.ForeignKey("catalog.Runtime", on_delete=models.PROTECT, related_name="services")
    adapters = models.ManyToManyField("catalog.Adapter", blank=True, related_name="services")
    deployment_mode = models.CharField(max_length=32, choices=DeploymentMode.choices, default=DeploymentMode.STANDARD)
    engine_settings = models.JSONField(
        default=dict, blank=True, help_text="Keys of apps.catalog.engines.EngineSettings."
    )
    routing_policy = models.CharField(max_length=32, choices=RoutingPolicy.choices, default=RoutingPolicy.ROUND_ROBIN)
    autoscaling = models.JSONField(
        default=default_autoscaling,
        blank=True,
        help_text='{"autoscaler": "builtin|hpa|keda|none", "targets": {...}, ...}; see serving/autoscaling_spec.py.',
    )
    priority_class = models.ForeignKey(
        "tenancy.PriorityClass", null=True, blank=True, on_delete=models.PROTECT, related_name="services",
        help_text="The class the service runs at, at most the tenant's highest; empty: the tenant's default.")
    rollout = models.JSONField(
        default=default_rollout,
        blank=True,
        help_text='How a new revision replaces the running one: {"strategy": "rolling"} or {"strategy": "canary", '
                  '"steps": [{"weight": 5, "min_duration_seconds": 300, "analysis": true}, ..., {"weight": 100}], '
                  '"tolerance": 0.2, "min_requests": 100, ...}; see serving/rollout_spec.py.',
    )

    # Bookkeeping: generation counts spec changes, version counts every write (optimistic concurrency).
    generation = models.PositiveBigIntegerField(default=1, editable=False)
    version = models.PositiveBigIntegerField(default=1, editable=False)

    # Observed status, written by the reconciler.
    observed_generation = models.PositiveBigIntegerField(default=0, editable=False)
    phase = models.CharField(max_length=16, choices=Phase.choices, default=Phase.PENDING, editable=False)
    conditions = models.JSONField(default=list, blank=True, editable=False)
    ready_replicas = models.PositiveIntegerField(default=0, editable=False)
    endpoint = models.CharField(max_length=500, blank=True, editable=False)
    deletion_requested_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Where the replicas stand with the tenant's queue: {"state": AdmissionState, "reason": words, "at": ISO time,
    # "by": preemptor}; written by the admission pass (no Kueue) or read back from Kueue's Workloads.
    admission = models.JSONField(default=dict, blank=True, editable=False)
    last_reconciled_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Set when a reconcile is queued, cleared when it starts: the resync never queues a service twice.
    queued_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = InferenceServiceQuerySet.as_manager()

    class Meta:
        ordering = ["tenant__slug", "name"]
        # The id rides along in the (tenant, name) index, so a list page is chosen from the index alone
        # (an index-only scan) however deep its OFFSET; see apps/serving/api/listing.py.
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], include=["id"],
                                               name="serving_service_unique_name")]
        indexes = [models.Index(fields=["observed_generation", "generation"], name="serving_behind_idx")]

    def __str__(self) -> str:
        return f"{self.tenant}/{self.name}" if self.tenant_id else self.name

    # -- the spec under validation -------------------------------------------------------------
    # The API and admin validate a service together with pools and adapters that are not saved
    # yet; they attach them with `stage_spec()` so that `clean()` judges the whole thing at once.

    def stage_spec(self, *, pools: list[Pool] | None = None, adapters: list | None = None) -> None:
        if pools is not None:
            self._staged_pools = pools
        if adapters is not None:
            self._staged_adapters = adapters

    def spec_pools(self) -> list[Pool]:
        staged = getattr(self, "_staged_pools", None)
        if staged is not None:
            return staged
        return list(self.pools.all()) if self.pk else []

    def spec_adapters(self) -> list:
        staged = getattr(self, "_staged_adapters", None)
        if staged is not None:
            return staged
        return list(self.adapters.all()) if self.pk else []

    def clean(self) -> None:
        if getattr(self, "_defer_spec_validation", False):
            # The admin form validates the spec in its pool formset, once the pools are known.
            return
        errors = service_errors(self, self.spec_pools(), self.spec_adapters())
        if errors:
            raise ValidationError(errors)
        self.fill_autoscaling_defaults()

    def fill_autoscaling_defaults(self) -> None:
        """Write the built-in autoscaler's defaults into the stored policy, so the API shows what runs."""
        from apps.serving.choices import Autoscaler
        from apps.serving.scaling_policy import normalized_builtin

        if isinstance(self.autoscaling, dict) and self.autoscaling.get("autoscaler") == Autoscaler.BUILTIN:
            self.autoscaling = normalized_builtin(self.autoscaling, [p.role for p in self.spec_pools()])

    @property
    def autoscaled_by_builtin(self) -> bool:
        from apps.serving.choices import Autoscaler

        return isinstance(self.autoscaling, dict) and self.autoscaling.get("autoscaler") == Autoscaler.BUILTIN

    # -- helpers -----------------------------------------------------------------------------

    @property
    def is_deleting(self) -> bool:
        return self.deletion_requested_at is not None

    @property
    def etag(self) -> str:
        return f'"{self.version}"'

    def spec_snapshot(self, pools: list[Pool] | None = None, adapters: list | None = None) -> dict:
        """The spec as comparable data: a difference means a new generation."""
        pools = self.spec_pools() if pools is None else pools
        adapters = self.spec_adapters() if adapters is None else adapters
        return {
            **{name: getattr(self, name) for name in SPEC_FIELDS},
            "pools": sorted(
                [{"role": p.role, **{f: getattr(p, f) for f in POOL_SPEC_FIELDS}} for p in pools],
                key=lambda p: p["role"],
            ),
            "adapters": sorted(a.pk for a in adapters),
        }

    def audit_extra(self) -> dict:
        snap = self.spec_snapshot()
        return {"pools": snap["pools"], "adapters": snap["adapters"]}


    def engine_settings_obj(self):
        """The stored engine settings as `EngineSettings` (raises EngineSettingsError when invalid)."""
        return EngineSettings.from_dict(self.engine_settings)

    def gpus_at_max(self, pools: list[Pool] | None = None) -> int:
        return sum(p.gpus_at_max for p in (self.spec_pools() if pools is None else pools))


class Pool(models.Model):
    """The replicas of one role of a service (engine, prefill, decode, or a multi-node leader group)."""

    service = models.ForeignKey(InferenceService, on_delete=models.CASCADE, related_name="pools")
    role = models.CharField(max_length=16, choices=PoolRole.choices, default=PoolRole.ENGINE)
    replicas = models.PositiveIntegerField(default=1)
    min_replicas = models.PositiveIntegerField(default=1)
    max_replicas = models.PositiveIntegerField(default=1)
    gpus_per_replica = models.PositiveIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(64)],
        help_text="GPUs per pod (per node for multi-node replicas).",
    )
    gpu_type = models.CharField(max_length=32, choices=GpuType.choices, default=GpuType.H100_SXM_80GB)
    nodes_per_replica = models.PositiveIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(64)],
        help_text="Nodes per replica; above 1 only for multi-node services.",
    )
    # Observed by the reconciler.
    ready_replicas = models.PositiveIntegerField(default=0, editable=False)

    objects = restricted(tenant_owned("service__tenant"))

    class Meta:
        ordering = ["service_id", "role"]
        constraints = [models.UniqueConstraint(fields=["service", "role"], name="serving_pool_unique_role")]

    def __str__(self) -> str:
        return f"{self.role} x{self.replicas}"

    @property
    def gpus_at_max(self) -> int:
        return (self.max_replicas or 0) * (self.gpus_per_replica or 0) * (self.nodes_per_replica or 0)

    def clean(self) -> None:
        if None in (self.min_replicas, self.replicas, self.max_replicas):
            return
        errors = {}
        if self.min_replicas > self.replicas:
            errors["min_replicas"] = [f"min_replicas ({self.min_replicas}) must not exceed replicas ({self.replicas})."]
        if self.replicas > self.max_replicas:
            errors["replicas"] = [f"replicas ({self.replicas}) must not exceed max_replicas ({self.max_replicas})."]
        if errors:
            raise ValidationError(errors)


class ServiceObservation(models.Model):
    """What the reconciler last saw of a service in its cluster: pods, events, per-pool counts.

    Written by the workers on every pass that sees something new; read by the service page.
    """

    service = models.OneToOneField(InferenceService, on_delete=models.CASCADE, related_name="observation")
    pools = models.JSONField(default=list, blank=True)  # [{role, desired, ready, updated}]
    pods = models.JSONField(default=list, blank=True)  # [{name, role, phase, ready, node, gpus, reason, ...}]
    events = models.JSONField(default=list, blank=True)  # [{type, reason, message, object, time, count}]
    drift = models.JSONField(default=list, blank=True)  # [{object, diff, found_at}]: live differed from desired
    # Live status of the service's HPAs / KEDA ScaledObjects: [{kind, name, current, desired, conditions, ...}]
    autoscalers = models.JSONField(default=list, blank=True)
    # The replicas' start-up phases read from their pods' Events (apps/serving/startup.py `record`), newest first.
    startups = models.JSONField(default=list, blank=True)
    # Run-time LoRA adapters per ready engine pod, from its /v1/models: {pod: {held: [...], refused?: {...}}}
    # or {pod: {error}} (workers.adaptersync)
    adapters = models.JSONField(default=dict, blank=True)
    observed_at = models.DateTimeField(null=True, blank=True)

    objects = restricted(tenant_owned("service__tenant"))

    def __str__(self) -> str:
        return f"observation of {self.service_id}"


class ReconcileRun(models.Model):
    """One reconcile pass that did something or failed (steady-state no-ops are not recorded)."""

    service = models.ForeignKey(InferenceService, on_delete=models.CASCADE, related_name="reconcile_runs")
    started_at = models.DateTimeField(db_index=True)
    generation = models.PositiveBigIntegerField()
    result = models.CharField(max_length=16, choices=ReconcileResult.choices)
    applied = models.PositiveIntegerField(default=0)
    pruned = models.PositiveIntegerField(default=0)
    duration_ms = models.PositiveIntegerField(default=0)
    message = models.TextField(blank=True)

    objects = restricted(tenant_owned("service__tenant"))

    class Meta:
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["service", "-started_at"], name="serving_run_recent_idx")]

    def __str__(self) -> str:
        return f"{self.service_id} {self.result} at {self.started_at:%H:%M:%S}"


class Revision(models.Model):
    """One immutable version of what a service's pods run (see apps/serving/revisions.py).

    A new one is written by `actions.save_service` whenever a save changes the rendered pod templates;
    the highest number is the current revision. A rollback writes a new revision whose `spec` equals the
    restored one's and names it in `restored_from`.
    """

    service = models.ForeignKey(InferenceService, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    spec = models.JSONField(help_text="What the pods run: model, runtime, adapters, mode, engine settings, "
                                      "routing policy and pools.")
    created = models.DateTimeField(auto_now_add=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+")
    actor_repr = models.CharField(max_length=150, blank=True)
    audit_entry = models.ForeignKey("core.AuditEntry", null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    restored_from = models.PositiveIntegerField(null=True, blank=True,
                                                help_text="The revision a rollback made current again.")

    objects = restricted(tenant_owned("service__tenant"))

    class Meta:
        ordering = ["service_id", "-number"]
        constraints = [models.UniqueConstraint(fields=["service", "number"], name="serving_revision_unique_number")]

    def __str__(self) -> str:
        return f"{self.service} revision {self.number}"


class ModelCache(TimestampedModel):
    """The platform's choice to keep a platform-wide model on a cluster: once in the cluster cache for every tenant
    whose catalog includes it, and copied by the model agent to nodes' local disks within a per-node budget."""

    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="model_caches")
    model = models.ForeignKey("catalog.Model", on_delete=models.PROTECT, related_name="caches")
    node_budget_gb = models.PositiveIntegerField(
        default=500, validators=[MinValueValidator(1)],
        help_text="Disk per node the model agent may fill with model copies (GB, decimal); at most a node's disk.")

    objects = restricted(staff_only("the platform's cache of a platform-wide model, for every tenant"))

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "model"], name="serving_modelcache_unique")]

    def __str__(self) -> str:
        return f"{self.model} on {self.cluster}"

    def clean(self) -> None:
        from capacity.modelcache import BudgetError, check_budget
        from capacity.startup import NODE_DISK_BYTES

        errors: dict[str, list[str]] = {}
        if self.model_id and self.model.tenant_id is not None:
            errors["model"] = [f"{self.model.name} is private to tenant {self.model.tenant}: a private model stays "
                               "in its tenant's namespace and is never cached for the platform."]
        if self.node_budget_gb:
            try:
                check_budget(self.node_budget_gb * 10**9, NODE_DISK_BYTES)
            except BudgetError:
                errors["node_budget_gb"] = [f"{self.node_budget_gb:,} GB is more than a node's disk "
                                            f"({NODE_DISK_BYTES // 10**9:,} GB)."]
        if self.cluster_id and not self.cluster.reads_node_copies:
            errors["cluster"] = [f"Engine pods on {self.cluster.name} read no node-local copies (node model volume "
                                 "\"none\"): set it to hostPath or csi first, or there is nothing to cache on nodes."]
        if errors:
            raise ValidationError(errors)
