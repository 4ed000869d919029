"""The HPA and KEDA autoscalers in the what-if lab: what the objects the renderer renders for a service
(`apps.serving.rendering.extras`) would decide, on the fleet simulation's scrapes.

An HPA (`autoscaling: {"autoscaler": "hpa", ...}`) averages each per-pod series target (waiting or running
requests, KV-cache usage) over the pool's pods (`rules.metric_replicas`, Kubernetes' calcPlainMetricReplicas)
and takes the largest recommendation; latency and token-rate targets are not rendered into an HPA, so they
do not act here either. A KEDA ScaledObject (`"keda"`) gives the HPA External metrics: pool-wide sums against
an AverageValue threshold (`rules.external_replicas`) for the per-pod series and prompt tokens/s, and the
pool's TTFT or ITL p95 against a Value target (ceil(current × value / target) outside the tolerance). Both
then go through Kubernetes' behavior (`rules.normalize`: the service's stabilization windows, the default rate
limits). KEDA alone reaches zero (pool minimum 0, serverless services): its cooldown is the service's
`scale_to_zero_after_seconds` (else 300 s, as rendered), counted from the last request in flight (the
simulation's `idle_for`: the request-count triggers are zero from then on), and it activates from zero as soon
as a request waits for a replica (polling every 15 s, as rendered).
"""

from __future__ import annotations

import math

from apps.autoscaling.rules import History, external_replicas, metric_replicas, normalize, record_scale
from apps.serving.choices import Autoscaler
from apps.serving.scaling_policy import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    DEFAULT_TOLERANCE,
    PoolPolicy,
    rules_from_dict,
)

PER_POD = ("waiting_requests_per_replica", "running_requests_per_replica", "kv_cache_usage")
POOL_WIDE = {"prompt_tokens_per_s_per_replica": "prompt_tps"}  # target -> the simulation's pool-wide figure
LATENCY = {"ttft_p95_seconds": "ttft_p95", "itl_p95_seconds": "itl_p95"}
KEDA_COOLDOWN_S = 300  # the rendered ScaledObject's cooldownPeriod without scale_to_zero_after_seconds


class KubeScaler:
    """An HPA or a KEDA ScaledObject on one engine pool: `decide(state, last_active) -> replicas`."""

    def __init__(self, kind: str, targets: dict, policy: PoolPolicy, cooldown_s: float | None):
        self.kind, self.policy, self.cooldown_s = kind, policy, cooldown_s
        known = PER_POD if kind == Autoscaler.HPA else (*PER_POD, *POOL_WIDE, *LATENCY)
        self.targets = tuple((name, float(value)) for name, value in targets.items() if name in known)
        self.history = History()

    def _recommendation(self, name: str, target: float, s: dict, current: int) -> int | None:
        tolerance = self.policy.tolerance
        if self.kind == Autoscaler.HPA:
            return metric_replicas(name, target, current, s["pods"], tolerance).replicas
        if name in PER_POD:
            total = sum(p.metrics.get(name, 0) for p in s["pods"] if p.ready)
            return external_replicas(total, target, current, tolerance)
        if name in POOL_WIDE:
            return external_replicas(s[POOL_WIDE[name]], target, current, tolerance)
        value = s[LATENCY[name]]
        if value is None:
            return None  # no request finished in the period: the query has no sample, the HPA keeps its count
        ratio = value / target
        return current if abs(1.0 - ratio) <= tolerance else math.ceil(ratio * current)

    def __call__(self, s: dict, last_active: float) -> int:
        current = s["replicas"]
        if self.cooldown_s is not None:  # KEDA with a pool minimum of 0: it owns the 0 <-> 1 step
            if current == 0:
                return 1 if s["held"] else 0
            if s["idle_for"] >= self.cooldown_s:
                return 0
        floor = max(self.policy.min_replicas, 1)
        if current < floor:
            return floor
        raws = [r for name, target in self.targets
                if (r := self._recommendation(name, target, s, current)) is not None]
        raw = max(raws) if raws else current
        _, limited, self.history, _, _ = normalize(self.policy, self.history, s["t"], current, raw)
        if limited != current:
            self.history = record_scale(self.history, s["t"], current, limited, self.policy.longest_period_s)
        return limited


def kube_scaler(autoscaling: dict, pool) -> tuple[KubeScaler, int]:
    """The HPA or KEDA policy of `autoscaling` (a service's stored policy) on `pool`, and the replicas it
    starts with."""
    kind = autoscaling["autoscaler"]
    up = rules_from_dict({"stabilization_window_s": autoscaling["scale_up_stabilization_seconds"]}
                         if autoscaling.get("scale_up_stabilization_seconds") is not None else None, DEFAULT_SCALE_UP)
    down = rules_from_dict({"stabilization_window_s": autoscaling["scale_down_stabilization_seconds"]}
                           if autoscaling.get("scale_down_stabilization_seconds") is not None else None,
                           DEFAULT_SCALE_DOWN)
    low = pool.min_replicas if kind == Autoscaler.KEDA else max(pool.min_replicas, 1)
    policy = PoolPolicy(min_replicas=max(low, 1), max_replicas=max(pool.max_replicas, 1), metrics=(),
                        tolerance=DEFAULT_TOLERANCE, scale_up=up, scale_down=down)
    cooldown = None
    if kind == Autoscaler.KEDA and low == 0:
        cooldown = autoscaling.get("scale_to_zero_after_seconds") or KEDA_COOLDOWN_S
    return KubeScaler(kind, autoscaling.get("targets") or {}, policy, cooldown), low
