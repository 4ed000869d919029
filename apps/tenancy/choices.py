"""Vocabularies of tenancy: how a priority class preempts, and the admission states of a service."""

from django.db import models


class PreemptionPolicy(models.TextChoices):
    """Kueue's `withinClusterQueue` policy for a class's workloads (and the pods' PriorityClass policy)."""

    LOWER_PRIORITY = "LowerPriority", "Preempt lower priority"
    NEVER = "Never", "Never preempt"


class AdmissionState(models.TextChoices):
    """Where a service's replicas stand with their tenant queue."""

    ADMITTED = "admitted", "Admitted"
    WAITING = "waiting", "Waiting for quota"
    PREEMPTED = "preempted", "Preempted"


# The classes the platform ships (name, value, description), created by a migration; staff may add others.
DEFAULT_PRIORITY_CLASSES = (
    ("production", 1000, "Serving that users wait on; preempts lower classes to reclaim its quota."),
    ("standard", 100, "The default class."),
    ("best-effort", 0, "Runs on spare quota; the first to be preempted."),
    ("batch", -10, "Offline work on whatever is left."),
)
# A service without a class, of a tenant without a default class, runs at this one.
PLATFORM_DEFAULT_CLASS = "standard"
# The nominal-quota key for GPUs of any type without their own entry: what a tenant's former GPU quota became.
ANY_GPU_TYPE = "*"
