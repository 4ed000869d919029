"""Priority classes and tenant queues: the GPUs a tenant may hold (nominal quota per GPU type, in a cohort
whose members lend each other unused quota) and the priorities its services run at.

The same records are rendered as Kueue objects on clusters with Kueue (apps/serving/rendering/kueue.py) and
fed to the admission policy (`capacity.kueue.admit`) where Kueue is absent (apps/serving/admission.py).
Staff write both; tenants read their own queues and the classes they may use.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from apps.core.access import (
    RestrictedQuerySet,
    is_platform_staff,
    member_tenant_ids,
    restricted,
    staff_only,
    tenant_owned,
)
from apps.core.models import TimestampedModel
from apps.core.validators import dns1123_label
from apps.tenancy.choices import ANY_GPU_TYPE, PLATFORM_DEFAULT_CLASS, PreemptionPolicy
from capacity.gpus import choices as gpu_choices

# Kubernetes refuses user PriorityClass values above one billion (higher ones are the system's).
MAX_PRIORITY_VALUE = 1_000_000_000
MIN_PRIORITY_VALUE = -2_147_483_648
ONE_QUEUE = "The tenant already has a queue on this cluster (or, without a cluster, on every cluster)."
QUOTA_KEYS = frozenset({ANY_GPU_TYPE, *(key for key, _label in gpu_choices())})


class PriorityClassQuerySet(RestrictedQuerySet):
    """A platform catalog like clusters: staff only as rows; which classes a tenant may use is
    `usable_by_tenant`, asked by validation, the portal and the listing."""

    rule = staff_only("a platform catalog; tenants name a class up to their highest when they deploy")

    def platform_default(self) -> PriorityClass | None:
        """The class of services that name none, of tenants without a default (None once staff removed it)."""
        return self.filter(name=PLATFORM_DEFAULT_CLASS).first()

    def usable_by_tenant(self, tenant) -> PriorityClassQuerySet:
        """The classes at or below the tenant's highest (every class when staff set none)."""
        highest = tenant.max_priority_class
        return self if highest is None else self.filter(value__lte=highest.value)

    def usable_by_user(self, user) -> PriorityClassQuerySet:
        """Every class for staff; otherwise those some tenant of the user may use."""
        if is_platform_staff(user):
            return self
        if not getattr(user, "is_authenticated", False):
            return self.none()
        tenants = member_tenant_ids(user)
        if tenants.filter(tenant__max_priority_class__isnull=True).exists():
            return self
        top = self.filter(capped_tenants__in=tenants).aggregate(top=models.Max("value"))["top"]
        return self.none() if top is None else self.filter(value__lte=top)


class PriorityClass(TimestampedModel):
    """A named priority a service runs at: a Kueue WorkloadPriorityClass and a pod PriorityClass."""

    name = models.CharField(max_length=63, unique=True, validators=[dns1123_label])
    value = models.IntegerField(
        validators=[MinValueValidator(MIN_PRIORITY_VALUE), MaxValueValidator(MAX_PRIORITY_VALUE)],
        help_text="Higher runs first and may preempt lower; at most one billion (Kubernetes' user range).",
    )
    preemption_policy = models.CharField(
        max_length=16, choices=PreemptionPolicy.choices, default=PreemptionPolicy.LOWER_PRIORITY,
        help_text="Whether this class's workloads preempt lower-priority ones of their own tenant's queue.",
    )
    description = models.TextField(blank=True)

    objects = PriorityClassQuerySet.as_manager()

    class Meta:
        ordering = ["-value", "name"]
        verbose_name_plural = "priority classes"

    def __str__(self) -> str:
        return f"{self.name} ({self.value})"

    def users(self) -> dict[str, int]:
        """What refers to this class: services, tenants' highest and default (counts, names withheld)."""
        services = self.services.count()
        if self.name == PLATFORM_DEFAULT_CLASS:
            # Services without a class, of tenants without a default, run at the platform default.
            services += TenantQueue.services_of_tenants(default_priority_class__isnull=True).filter(
                priority_class__isnull=True).count()
        found = {"services": services,
                 "tenants": len({*self.capped_tenants.values_list("pk", flat=True),
                                 *self.defaulted_tenants.values_list("pk", flat=True)})}
        return {kind: count for kind, count in found.items() if count}

    def validate_removal(self) -> None:
        """Raise ValidationError (code `in_use`, a 409) while anything runs at or is capped by this class."""
        used = self.users()
        if used:
            words = ", ".join(f"{count} {kind}" for kind, count in used.items())
            raise ValidationError(f"Priority class {self.name} is in use by {words}; move them to another first.",
                                  code="in_use")

    def delete(self, *args, **kwargs):
        self.validate_removal()
        return super().delete(*args, **kwargs)


def _quota_map_errors(field: str, value, *, limits: bool) -> list[str]:
    """Messages for a {GPU type: GPUs} map: known types (or "*"), non-negative integers (None for a limit)."""
    if not isinstance(value, dict):
        return [f"{field} maps a GPU type (or {ANY_GPU_TYPE!r} for any type) to a number of GPUs."]
    errors = []
    for key, count in value.items():
        if key not in QUOTA_KEYS:
            errors.append(f"{key!r} is not a GPU type; use one of {', '.join(sorted(QUOTA_KEYS))}.")
        elif count is None and limits:
            continue
        elif isinstance(count, bool) or not isinstance(count, int) or count < 0:
            errors.append(f"{key}: {count!r} is not a whole, non-negative number of GPUs.")
    return errors


class TenantQueue(TimestampedModel):
    """A tenant's ClusterQueue: nominal GPUs per GPU type on one cluster (or on every cluster without a queue
    of its own), lent to the cohort when unused within `lending_limit`, borrowed within `borrowing_limit`."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="queues")
    cluster = models.ForeignKey(
        "clusters.Cluster", null=True, blank=True, on_delete=models.CASCADE, related_name="tenant_queues",
        help_text="Empty: the tenant's queue on every cluster that has no queue of its own for it.")
    cohort = models.CharField(
        max_length=63, blank=True, validators=[dns1123_label],
        help_text="Queues of one cohort lend each other unused quota. Empty: the cluster's own cohort.")
    nominal = models.JSONField(
        default=dict, blank=True,
        help_text=f'GPUs per GPU type, e.g. {{"l4-24gb": 6}}; "{ANY_GPU_TYPE}" counts every type without its own '
                  'entry.')
    borrowing_limit = models.JSONField(
        default=dict, blank=True,
        help_text="Most GPUs per type borrowed beyond the nominal quota; a type left out (or null) borrows "
                  "whatever the cohort lends.")
    lending_limit = models.JSONField(
        default=dict, blank=True,
        help_text="Most unused GPUs per type lent to the cohort; a type left out (or null) lends all of them.")
    weight = models.DecimalField(
        max_digits=6, decimal_places=2, default=1, validators=[MinValueValidator(0)],
        help_text="Fair sharing: borrowers get the cohort's spare GPUs in proportion to their weights.")

    # Members read their tenant's queues; only staff change them, like the quota they replaced.
    objects = restricted(tenant_owned("tenant", writers=frozenset()))

    class Meta:
        ordering = ["tenant__slug", "cluster__name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "cluster"], name="tenancy_queue_unique_cluster",
                                    violation_error_code="unique", violation_error_message=ONE_QUEUE),
            models.UniqueConstraint(fields=["tenant"], condition=Q(cluster__isnull=True),
                                    name="tenancy_queue_unique_default", violation_error_code="unique",
                                    violation_error_message=ONE_QUEUE),
        ]

    def __str__(self) -> str:
        return f"{self.tenant}@{self.cluster or 'every cluster'}"

    def nominal_of(self, key: str) -> int:
        return int(self.nominal.get(key, 0))

    def bucket(self, gpu_type: str) -> str:
        """The nominal-quota entry a GPU type counts against: its own, else "*" when the queue has one."""
        return gpu_type if gpu_type in self.nominal or ANY_GPU_TYPE not in self.nominal else ANY_GPU_TYPE

    def cohort_name(self, cluster) -> str:
        """The cohort on `cluster`: the queue's own, else the cluster's (one cohort per cluster by default)."""
        return self.cohort or cluster.name

    def peers(self) -> models.QuerySet:
        """The other tenants' queues of its cohort: same cohort name, on its cluster or on every cluster."""
        found = TenantQueue.objects.filter(cohort=self.cohort).exclude(tenant_id=self.tenant_id)
        if self.cluster_id is not None:
            found = found.filter(Q(cluster__isnull=True) | Q(cluster_id=self.cluster_id))
        return found

    def lendable(self, key: str) -> int:
        """What this queue may lend of one entry: its nominal quota, capped by its lending limit."""
        limit = self.lending_limit.get(key)
        return self.nominal_of(key) if limit is None else min(int(limit), self.nominal_of(key))

    def cohort_lendable(self, key: str) -> int:
        """What the rest of the cohort may lend of one entry (a peer without it lends from its "*")."""
        return sum(peer.lendable(peer.bucket(key) if key != ANY_GPU_TYPE else key) for peer in self.peers())

    def ceiling(self, key: str) -> int:
        """The most GPUs of one entry the tenant may hold: nominal plus what it may borrow."""
        limit = self.borrowing_limit.get(key)
        if limit == 0:
            return self.nominal_of(key)  # no need to ask the cohort
        lendable = self.cohort_lendable(key)
        return self.nominal_of(key) + (lendable if limit is None else min(int(limit), lendable))

    def total_ceiling(self) -> int:
        """The most GPUs of all types together (the namespace's ResourceQuota on requested GPUs)."""
        return sum(self.ceiling(key) for key in self.nominal)

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}
        for field, limits in (("nominal", False), ("borrowing_limit", True), ("lending_limit", True)):
            found = _quota_map_errors(field, getattr(self, field), limits=limits)
            if found:
                errors[field] = found
        if not errors and self.tenant_id:
            errors.update(self._borrowing_errors())
        if errors:
            raise ValidationError(errors)

    def _borrowing_errors(self) -> dict[str, list[str]]:
        """A borrowing limit above what the rest of the cohort may lend could never be reached."""
        found = []
        for key, limit in self.borrowing_limit.items():
            if limit is not None and limit > (lendable := self.cohort_lendable(key)):
                found.append(f"{key}: a borrowing limit of {limit} GPUs is above the {lendable} the rest of "
                             f"cohort {self.cohort or 'of the cluster'} may lend.")
        return {"borrowing_limit": found} if found else {}

    @staticmethod
    def services_of_tenants(**tenant_filter) -> models.QuerySet:
        """The live services (not being deleted) of the tenants matching `tenant_filter`, reached through the
        relation: tenancy imports no serving module."""
        services = TenantQueue._meta.get_field("tenant").related_model._meta.get_field("services").related_model
        return services.objects.filter(deletion_requested_at__isnull=True,
                                       **{f"tenant__{k}": v for k, v in tenant_filter.items()})

    def covered_services(self) -> models.QuerySet:
        """The tenant's live services whose GPUs count against this queue: on its cluster, or, for the queue of
        every cluster, on the clusters where the tenant has no queue of its own."""
        services = TenantQueue.services_of_tenants(pk=self.tenant_id)
        if self.cluster_id is not None:
            return services.filter(cluster_id=self.cluster_id)
        own = TenantQueue.objects.filter(tenant_id=self.tenant_id, cluster__isnull=False).values("cluster_id")
        return services.exclude(cluster_id__in=own)

    def validate_removal(self) -> None:
        """Raise ValidationError (code `in_use`, a 409) while services of the tenant run under this queue."""
        count = self.covered_services().count()
        if count:
            raise ValidationError(f"The queue of {self} is in use by {count} service(s); delete or move them first.",
                                  code="in_use")

    def delete(self, *args, **kwargs):
        self.validate_removal()
        return super().delete(*args, **kwargs)


def set_gpu_quota(tenant, gpus: int) -> TenantQueue:
    """Give the tenant a hard GPU quota, as a former `gpu_quota` became one: its queue on every cluster, `gpus` of
    any type, neither lent nor borrowed (for seeds, benches and tests; staff shape queues in the admin or API)."""
    queue, _ = TenantQueue.objects.update_or_create(
        tenant=tenant, cluster=None, defaults={"nominal": {ANY_GPU_TYPE: gpus}, "borrowing_limit": {ANY_GPU_TYPE: 0},
                                               "lending_limit": {ANY_GPU_TYPE: 0}})
    return queue

