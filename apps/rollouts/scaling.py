"""The built-in autoscaler during a canary rollout: each revision scaled by its share of the load.

While a rollout runs (or is paused), each pool of the service is two targets of apps.autoscaling.evaluate: the
stable revision's pods and the canary unit's (`<service>-r<N>-…`). Each is judged on its own pods' figures, which
carry the share of the requests its weight sends it, so both revisions serve at the pool's targets per replica and
the canary is not judged on an idler (or busier) engine than stable. Each decision names its revision.

- The stable side scales up as usual but never down: it keeps its replicas until promotion, ready to take all the
  requests back on a rollback. Its replica rates are the stable revision's (model, runtime, settings, GPU), not the
  service's current spec's, which is the canary's.
- The canary side scales between 1 and the pool's maximum (the quota check at save counted the service's GPUs at
  maximum replicas twice); its count is kept on the rollout (`Rollout.canary_replicas`) and rendered by
  apps/rollouts/units.py; a change bumps the generation and reconciles, as a weight does.
- The tenant's canary units count against its GPU quota in every scale-up's bound.

Without a rollout the service is evaluated as before. The beat task (workers/tasks/autoscale.py) calls this.
"""

from __future__ import annotations

from copy import copy
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.autoscaling import evaluate as autoscale
from apps.autoscaling.evaluate import PoolOutcome, Target, evaluate_target, pool_rates, pool_target
from apps.autoscaling.models import PoolAutoscalerState
from apps.catalog.models import Model, Runtime
from apps.rollouts.choices import ACTIVE_PHASES
from apps.rollouts.controller import rerender
from apps.rollouts.models import Rollout
from apps.rollouts.units import canary_replicas
from apps.serving.models import InferenceService, Pool, Revision
from apps.serving.names import canary_name
from apps.telemetry.models import CANARY_ROLE, STABLE_ROLE

CANARY_STATE = "{role}@r{revision}"  # the canary side's PoolAutoscalerState.pool (a role is at most 7 letters)


def evaluate_service(service_id: int, now: datetime | None = None, between: bool = False) -> list[PoolOutcome]:
    """Evaluate one service: both revisions of each pool while a rollout is active, else each pool. `between`: a
    surge check between the evaluations instead (`apps.autoscaling.surge`), none while a rollout is active (the
    periodic evaluations scale its two revisions apart)."""
    now = now or timezone.now()
    rollout = (Rollout.objects.select_related("service__tenant")
               .filter(service_id=service_id, phase__in=ACTIVE_PHASES).first())
    if rollout is None:
        if not between:  # the canary sides of rollouts that have ended are history no evaluation will read again
            PoolAutoscalerState.objects.filter(service_id=service_id, pool__contains="@").delete()
        tenant_id = InferenceService.objects.filter(pk=service_id).values_list("tenant_id", flat=True).first()
        return autoscale.evaluate_service(service_id, now, other_gpus=lambda: canary_gpus(tenant_id), between=between)
    if between:
        return []
    service = rollout.service
    if not service.autoscaled_by_builtin or service.is_deleting:
        return []
    pools = list(service.pools.all())
    out = []
    for pool in pools:
        key = CANARY_STATE.format(role=pool.role, revision=rollout.to_revision)
        out.append(evaluate_target(service, pool.role, lambda pk=pool.pk: stable_target(rollout, pk), len(pools) > 1,
                                   now))
        out.append(evaluate_target(service, key, lambda pk=pool.pk: canary_target(rollout, pk), len(pools) > 1, now))
    return out


def stable_target(rollout: Rollout, pool_pk: int) -> Target:
    """The stable revision's side of a pool: its pods (not the canary unit's), scaled up through the pool's scale
    action, never down below what it runs now."""
    pool = Pool.objects.get(pk=pool_pk)
    target = pool_target(rollout.service, pool)
    target.min_replicas = max(pool.min_replicas, min(pool.replicas, pool.max_replicas))
    target.revision = rollout.from_revision
    target.not_prefix = canary_name(rollout.service.name, rollout.to_revision) + "-"
    target.series_role = STABLE_ROLE
    target.words = (f"revision {rollout.from_revision} (stable, {100 - rollout.weight} % of the requests; kept at "
                    f"{target.min_replicas} or more until promotion)")
    target.other_gpus = lambda: canary_gpus(rollout.service.tenant_id)
    target.rates = lambda: stable_rates(rollout, pool.role)
    return target


def stable_rates(rollout: Rollout, role: str):
    """The replica rates of the stable revision's pool (its model, runtime, engine settings and GPU), which the
    service's current spec, the new revision's, no longer describes."""
    spec = Revision.objects.filter(service_id=rollout.service_id, number=rollout.from_revision).values_list(
        "spec", flat=True).first()
    stored = next((p for p in (spec or {}).get("pools", []) if p["role"] == role), None)
    if stored is None:
        return None
    service = copy(rollout.service)
    service.model = Model.objects.filter(pk=spec["model"]).first()
    service.runtime = Runtime.objects.filter(pk=spec["runtime"]).first()
    service.engine_settings = spec["engine_settings"]
    if service.model is None or service.runtime is None:
        return None
    return pool_rates(service, Pool(role=role, **{k: v for k, v in stored.items() if k != "role"}))


def canary_target(rollout: Rollout, pool_pk: int) -> Target:
    """The canary unit's side of a pool: its pods, between 1 and the pool's maximum, its count kept on the
    rollout."""
    pool = Pool.objects.get(pk=pool_pk)
    current = Rollout.objects.get(pk=rollout.pk)
    replicas = canary_replicas(pool.replicas, current.weight or rollout.weight,
                               (current.canary_replicas or {}).get(pool.role))

    def scale(desired: int) -> int | None:
        with transaction.atomic():
            locked = Rollout.objects.select_for_update().get(pk=rollout.pk)
            if not locked.active:
                raise ValidationError({"rollout": f"The rollout of revision {locked.to_revision} has ended "
                                                  f"({locked.phase}); its canary is not scaled."})
            locked.canary_replicas = {**(locked.canary_replicas or {}), pool.role: desired}
            locked.save(update_fields=["canary_replicas"])
            return rerender(rollout.service_id)

    return Target(pool=pool, replicas=replicas, min_replicas=1, max_replicas=max(pool.max_replicas, 1), scale=scale,
                  revision=rollout.to_revision, pod_prefix=canary_name(rollout.service.name, rollout.to_revision) + "-",
                  series_role=CANARY_ROLE,
                  words=f"revision {rollout.to_revision} (canary, {rollout.weight} % of the requests)",
                  other_gpus=lambda: canary_gpus(rollout.service.tenant_id))


def canary_gpus(tenant_id: int | None) -> int:
    """GPUs the tenant's canary units hold now (no Pool row counts them)."""
    total = 0
    for rollout in Rollout.objects.filter(service__tenant_id=tenant_id, phase__in=ACTIVE_PHASES):
        for pool in Pool.objects.filter(service_id=rollout.service_id):
            n = canary_replicas(pool.replicas, rollout.weight, (rollout.canary_replicas or {}).get(pool.role))
            total += n * pool.gpus_per_replica * pool.nodes_per_replica
    return total
