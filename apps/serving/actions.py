"""Domain operations on services, shared by the API, the admin, the portal and management commands.

Each validates the whole service atomically (pools and adapters included), holds the tenant row
lock while checking the GPU quota so two concurrent writes cannot both squeeze under it, bumps
`generation` on spec changes and `version` on every write, records an AuditEntry and enqueues a
reconcile after commit.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.core.audit import record_change, snapshot
from apps.core.choices import AuditAction, AuditVia
from apps.serving.choices import Phase
from apps.serving.dispatch import enqueue_reconcile
from apps.serving.models import POOL_SPEC_FIELDS, SPEC_FIELDS, InferenceService, Pool, Revision
from apps.serving.rendering.spec import PoolSpec
from apps.serving.revisions import pod_fingerprint, record_revision, rollback_target
from apps.tenancy.models import Tenant

SPEC_COLUMNS = [name.removesuffix("_id") for name in SPEC_FIELDS]


class StaleVersion(Exception):
    """The caller edited an older version of the service than the one stored."""

    def __init__(self, current: int):
        super().__init__(f"The service changed since it was read (current version {current}).")
        self.current = current


class ServiceDeleting(Exception):
    """The service is being deleted; its spec can no longer change."""


class AutoscalerOwnsReplicas(Exception):
    """A manual scale of a pool the built-in autoscaler sets (answered 409: change min/max instead)."""

    def __init__(self, service: InferenceService, role: str):
        super().__init__(
            f"The {role} pool of {service} is scaled by the builtin autoscaler; a manual scale would be undone at "
            f"its next evaluation. Change the pool's min_replicas/max_replicas (the autoscaler keeps replicas "
            f"within them) or set autoscaling.autoscaler to none."
        )


AUTOSCALER_ACTOR = "autoscaler:builtin"


def _lock_for_write(service: InferenceService, expected_version: int | None) -> InferenceService | None:
    Tenant.objects.select_for_update().filter(pk=service.tenant_id).first()
    if not service.pk:
        return None
    current = InferenceService.objects.select_for_update().get(pk=service.pk)
    if current.is_deleting:
        raise ServiceDeleting(f"Service {current} is being deleted.")
    if expected_version is not None and expected_version != current.version:
        raise StaleVersion(current.version)
    return current


def save_service(
    service: InferenceService,
    *,
    pools: list[PoolSpec],
    adapters: list,
    actor,
    via: AuditVia | str,
    expected_version: int | None = None,
    actor_label: str = "",
    restored_from: int | None = None,
) -> InferenceService:
    """Create or update a service with exactly these pools and adapters, or raise ValidationError.

    A save that changes the rendered pod templates writes a new Revision (`restored_from`: the revision a
    rollback makes current again, see apps/serving/revisions.py)."""
    try:
        return _save_service(service, pools, adapters, actor, via, expected_version, actor_label, restored_from)
    except IntegrityError as exc:
        if "serving_service_unique_name" in str(exc):
            # Two creates raced past clean(); the database constraint decided.
            raise ValidationError(
                {"name": ValidationError("A service with this name was just created in this tenant.", code="unique")}
            ) from exc
        raise


def _save_service(service, pools, adapters, actor, via, expected_version, actor_label,
                  restored_from=None) -> InferenceService:
    with transaction.atomic():
        current = _lock_for_write(service, expected_version)
        before = snapshot(current) if current else None
        before_pods = pod_fingerprint(current) if current else None
        existing = {p.role: p for p in current.pools.all()} if current else {}
        staged = []
        for spec in pools:
            pool = existing.get(spec.role) or Pool(service=service if service.pk else None, role=spec.role)
            live_replicas = pool.replicas
            for field in POOL_SPEC_FIELDS:
                setattr(pool, field, getattr(spec, field))
            if service.autoscaled_by_builtin and spec.role in existing:
                # The built-in autoscaler owns replicas: a spec update moves the bounds, and the current
                # count is kept within them instead of being reset to what the client last read.
                pool.replicas = min(max(live_replicas, pool.min_replicas), pool.max_replicas)
            staged.append(pool)
        service.stage_spec(pools=staged, adapters=list(adapters))
        service.full_clean()
        if current is None:
            service.save()
        else:
            changed = service.spec_snapshot() != current.spec_snapshot()
            service.generation = current.generation + (1 if changed else 0)
            service.version = current.version + 1
            # Only spec and bookkeeping: status fields belong to the reconciler, which may have
            # written them since the caller loaded this object.
            service.save(update_fields=[*SPEC_COLUMNS, "generation", "version", "updated"])
        for pool in staged:
            pool.service = service
            pool.save()
        stale_roles = set(existing) - {p.role for p in staged}
        if stale_roles:
            Pool.objects.filter(service=service, role__in=stale_roles).delete()
        service.adapters.set(adapters)
        service.stage_spec(pools=staged, adapters=list(adapters))
        entry = record_change(
            actor=actor,
            obj=service,
            action=AuditAction.UPDATE if current else AuditAction.CREATE,
            via=via,
            before=before,
            actor_label=actor_label,
        )
        record_revision(service, before=before_pods, entry=entry, restored_from=restored_from)
        enqueue_reconcile(service.pk)
    return service


def rollback(service: InferenceService, number: int, *, actor, via, actor_label: str = ""):
    """Make revision `number` current again: a save like any other (validated, audited, reconciled) that writes
    a new revision with the same spec and `restored_from=number`. Revision.DoesNotExist when unknown;
    revisions.RollbackRefused when it is what runs now or names a deleted model, runtime or adapter."""
    if not 0 < number < 2**31:
        raise Revision.DoesNotExist(f"No revision {number}.")
    revision = service.revisions.get(number=number)
    target, pools, adapters = rollback_target(InferenceService.objects.get(pk=service.pk), revision)
    save_service(target, pools=pools, adapters=adapters, actor=actor, via=via, actor_label=actor_label,
                 restored_from=number)
    return service.revisions.order_by("-number").first()


def scale_pool(
    service: InferenceService, *, role: str, replicas: int, actor, via, expected_version: int | None = None,
    by_autoscaler: bool = False,
) -> InferenceService:
    """Set one pool's replicas within its min and max; a spec change like any other.

    While the built-in autoscaler is on, only it may scale (`by_autoscaler`, audited as `autoscaler:builtin`);
    anyone else gets AutoscalerOwnsReplicas.
    """
    with transaction.atomic():
        current = _lock_for_write(service, expected_version)
        pool = current.pools.filter(role=role).first()
        if pool is None:
            roles = ", ".join(current.pools.values_list("role", flat=True))
            raise ValidationError({"pool": f"This service has no {role!r} pool (it has: {roles})."})
        if current.autoscaled_by_builtin and not by_autoscaler:
            raise AutoscalerOwnsReplicas(current, role)
        if not pool.min_replicas <= replicas <= pool.max_replicas:
            raise ValidationError(
                {
                    "replicas": f"replicas must be between min_replicas {pool.min_replicas} and "
                    f"max_replicas {pool.max_replicas}; got {replicas}."
                }
            )
        before = snapshot(current)
        if pool.replicas != replicas:
            pool.replicas = replicas
            pool.save(update_fields=["replicas"])
            current.generation += 1
        current.version += 1
        current.save(update_fields=["generation", "version", "updated"])
        record_change(actor=actor, obj=current, action=AuditAction.UPDATE, via=via, before=before,
                      actor_label=AUTOSCALER_ACTOR if by_autoscaler else "")
        enqueue_reconcile(current.pk)
    return current


def request_deletion(service: InferenceService, *, actor, via, expected_version: int | None = None) -> None:
    """Mark the service for deletion; the reconciler removes its Kubernetes objects, then the row."""
    with transaction.atomic():
        current = _lock_for_write(service, expected_version)
        before = snapshot(current)
        current.deletion_requested_at = timezone.now()
        current.phase = Phase.DELETING
        current.generation += 1
        current.version += 1
        current.save(update_fields=["deletion_requested_at", "phase", "generation", "version", "updated"])
        record_change(actor=actor, obj=current, action=AuditAction.DELETE, via=via, before=before, after=None)
        enqueue_reconcile(current.pk)


def finalize_deletion(service: InferenceService) -> None:
    """Called by the reconciler once the cluster holds nothing of the service: the row goes."""
    service.delete()
