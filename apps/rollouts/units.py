"""The canary unit: the new revision's ServiceSpec made into its own workload beside the stable one.

Pure over rendering specs (no database): `apps.rollouts.plan` builds the two specs from the database and calls
`with_canary`; tests call it on golden specs.
"""

from __future__ import annotations

import math
from dataclasses import replace

from apps.serving.names import canary_name
from apps.serving.rendering.spec import AutoscalingSpec, CanarySpec, ServiceSpec


def canary_replicas(stable_replicas: int, weight: int) -> int:
    """Replicas of a canary pool at `weight` %: the stable pool's share, rounded up, at least one."""
    return max(1, math.ceil(stable_replicas * weight / 100))


def canary_unit(new: ServiceSpec, revision: int, weight: int) -> ServiceSpec:
    """The new revision as its own unit: named `<service>-r<revision>`, labelled with the revision, each pool sized
    to its share of the stable pool (a P/D pair and a multi-node group scale as whole units), no autoscaler of
    its own (the rollout sizes it) and no route of its own."""
    pools = tuple(replace(p, replicas=(n := canary_replicas(p.replicas, weight)), min_replicas=n, max_replicas=n)
                  for p in new.pools)
    return replace(new, name=canary_name(new.name, revision), unit_revision=revision, pools=pools,
                   autoscaling=AutoscalingSpec(), canary=None)


def with_canary(stable: ServiceSpec, new: ServiceSpec, revision: int, weight: int) -> ServiceSpec:
    """The stable spec rendering the canary unit beside it, `weight` % of the requests going to the canary."""
    unit = canary_unit(replace(new, pools=tuple(_sized_like(p, stable) for p in new.pools)), revision, weight)
    return replace(stable, canary=CanarySpec(revision=revision, weight=weight, unit=unit))


def _sized_like(pool, stable: ServiceSpec):
    """The new revision's pool with the stable pool's current replicas (the autoscaler scales the stable one)."""
    for mine in stable.pools:
        if mine.role == pool.role:
            return replace(pool, replicas=mine.replicas)
    return pool
