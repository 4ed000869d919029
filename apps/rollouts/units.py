"""The canary unit: the new revision's ServiceSpec made into its own workload beside the stable one.

Pure over rendering specs (no database): `apps.rollouts.plan` builds the two specs from the database and calls
`with_canary`; tests call it on golden specs.
"""

from __future__ import annotations

import math
from dataclasses import replace

from apps.serving.names import canary_name
from apps.serving.rendering.spec import AutoscalingSpec, CanarySpec, ServiceSpec


def canary_replicas(stable_replicas: int, weight: int, set_to: int | None = None) -> int:
    """Replicas of a canary pool at `weight` %: what the autoscaler (or the step) set, else the stable pool's share,
    rounded up, at least one."""
    if set_to:
        return set_to
    return max(1, math.ceil(stable_replicas * weight / 100))


def sizes_for_step(stable: dict[str, int], sizes: dict[str, int], weight: int, new_weight: int) -> dict[str, int]:
    """The canary's replicas per role when its weight rises from `weight` to `new_weight`: what it runs now, or the
    stable pool's share at the new weight if that is more (the new share of the requests arrives at once; the
    autoscaler adjusts from there)."""
    return {role: max(canary_replicas(n, weight, sizes.get(role)), canary_replicas(n, new_weight))
            for role, n in stable.items()}


def canary_unit(new: ServiceSpec, revision: int, weight: int, sizes: dict[str, int] | None = None) -> ServiceSpec:
    """The new revision as its own unit: named `<service>-r<revision>`, labelled with the revision, each pool sized
    by `sizes` (the autoscaler's count per role) or to its share of the stable pool (a P/D pair and a multi-node
    group scale as whole units), no autoscaler of its own (apps.rollouts.scaling sizes it) and no route of its
    own."""
    sizes = sizes or {}
    pools = tuple(replace(p, replicas=(n := canary_replicas(p.replicas, weight, sizes.get(p.role))), min_replicas=n,
                          max_replicas=n)
                  for p in new.pools)
    return replace(new, name=canary_name(new.name, revision), unit_revision=revision, pools=pools,
                   autoscaling=AutoscalingSpec(), canary=None)


def with_canary(stable: ServiceSpec, new: ServiceSpec, revision: int, weight: int,
                sizes: dict[str, int] | None = None) -> ServiceSpec:
    """The stable spec rendering the canary unit beside it, `weight` % of the requests going to the canary."""
    unit = canary_unit(replace(new, pools=tuple(_sized_like(p, stable) for p in new.pools)), revision, weight, sizes)
    return replace(stable, canary=CanarySpec(revision=revision, weight=weight, unit=unit))


def _sized_like(pool, stable: ServiceSpec):
    """The new revision's pool with the stable pool's current replicas (the autoscaler scales the stable one)."""
    for mine in stable.pools:
        if mine.role == pool.role:
            return replace(pool, replicas=mine.replicas)
    return pool
