"""The built-in autoscaler's policy for one pool, its Kubernetes defaults, parsing and validation. It is kept
with the service spec and validated by the service's clean(), so it lives in serving.

Pure Python (no database): the rules, the replay command and `bench/autoscale.py` use it as is. A service
keeps the policy in `InferenceService.autoscaling` (see `apps.serving.autoscaling_spec`); `pool_policy()`
turns that JSON and a pool's min/max into a `PoolPolicy`, `normalized_builtin()` fills the defaults in so
the API shows what runs.

Kubernetes' default `behavior` (autoscaling/v2, HorizontalPodAutoscaler docs):
scaleDown: stabilizationWindowSeconds 300, Percent 100 per 15 s;
scaleUp: stabilizationWindowSeconds 0, Percent 100 per 15 s and Pods 4 per 15 s, selectPolicy Max.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from apps.serving.choices import PolicySelect, RatePolicyType

MAX_WINDOW_S = 3600  # windows (stabilization, scale to zero) are at most an hour
MAX_PERIOD_S = 1800  # the HPA's own bound on periodSeconds
DEFAULT_TOLERANCE = 0.1  # kube-controller-manager --horizontal-pod-autoscaler-tolerance
SLO_SCALE_DOWN_BELOW = 0.8  # no scale-down while a latency p95 is above this share of its target

# Per-replica signals (averaged over the pool's pods, as an HPA `Pods` metric with an AverageValue target)
# and the engine figure each is read from (apps.telemetry.figures.Figures field names).
METRIC_FIGURES = {
    "waiting_requests_per_replica": "waiting",
    "running_requests_per_replica": "running",
    "kv_cache_usage": "kv_cache_usage",
    "prompt_tokens_per_s_per_replica": "prompt_tokens_per_s",
    "generation_tokens_per_s_per_replica": "generation_tokens_per_s",
}
# Latency targets: not averaged per pod but compared pool-wide by the SLO guard.
SLO_TARGETS = {"ttft_p95_seconds": "ttft_p95_s", "itl_p95_seconds": "itl_p95_s"}
# Which signals suit which pool (prefill/decode disaggregation scales the two apart).
ROLE_SIGNALS = {
    "prefill": {"waiting_requests_per_replica", "prompt_tokens_per_s_per_replica", "ttft_p95_seconds"},
    "decode": {"running_requests_per_replica", "kv_cache_usage", "generation_tokens_per_s_per_replica",
               "itl_p95_seconds"},
}
ROLE_DEFAULT_TARGETS = {
    "prefill": {"waiting_requests_per_replica": 4},
    "decode": {"running_requests_per_replica": 32},
}


@dataclass(frozen=True)
class RatePolicy:
    """One HPAScalingPolicy: at most `value` pods (or percent) of change per `period_s`."""

    type: str
    value: int
    period_s: int

    def words(self, up: bool) -> str:
        sign = "+" if up else "-"
        unit = "%" if self.type == RatePolicyType.PERCENT else " pods"
        return f"{sign}{self.value}{unit} / {self.period_s} s"


@dataclass(frozen=True)
class ScalingRules:
    """HPAScalingRules of one direction."""

    stabilization_window_s: int
    select_policy: str
    policies: tuple[RatePolicy, ...]

    def as_dict(self) -> dict:
        return {"stabilization_window_s": self.stabilization_window_s, "select_policy": self.select_policy,
                "policies": [{"type": p.type, "value": p.value, "period_s": p.period_s} for p in self.policies]}


DEFAULT_SCALE_UP = ScalingRules(0, PolicySelect.MAX, (RatePolicy(RatePolicyType.PERCENT, 100, 15),
                                                      RatePolicy(RatePolicyType.PODS, 4, 15)))
DEFAULT_SCALE_DOWN = ScalingRules(300, PolicySelect.MAX, (RatePolicy(RatePolicyType.PERCENT, 100, 15),))


@dataclass(frozen=True)
class MetricTarget:
    name: str
    target: float


@dataclass(frozen=True)
class PoolPolicy:
    """Everything the rules need to decide one pool's replicas."""

    min_replicas: int
    max_replicas: int
    metrics: tuple[MetricTarget, ...]
    tolerance: float = DEFAULT_TOLERANCE
    scale_up: ScalingRules = DEFAULT_SCALE_UP
    scale_down: ScalingRules = DEFAULT_SCALE_DOWN
    ttft_p95_s: float | None = None
    itl_p95_s: float | None = None
    slo_scale_down_below: float = SLO_SCALE_DOWN_BELOW
    scale_to_zero_after_s: int | None = None
    longest_period_s: int = field(init=False, default=0)

    def __post_init__(self):
        periods = [p.period_s for p in (*self.scale_up.policies, *self.scale_down.policies)]
        windows = [self.scale_up.stabilization_window_s, self.scale_down.stabilization_window_s]
        object.__setattr__(self, "longest_period_s", max([*periods, *windows, 0]))


class PolicyError(ValueError):
    """A policy that cannot be used; `problems` lists what is wrong, field by field."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


# --- validation -------------------------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def rules_errors(rules: Any, where: str) -> list[str]:
    """Problems with one direction's behavior ({stabilization_window_s, select_policy, policies})."""
    if not isinstance(rules, dict):
        return [f"{where} must be an object."]
    problems = []
    unknown = set(rules) - {"stabilization_window_s", "select_policy", "policies"}
    if unknown:
        problems.append(f"{where}: unknown keys {', '.join(sorted(unknown))}.")
    window = rules.get("stabilization_window_s", 0)
    if not _is_whole(window) or not 0 <= window <= MAX_WINDOW_S:
        problems.append(f"{where}.stabilization_window_s must be whole seconds from 0 to {MAX_WINDOW_S}.")
    select = rules.get("select_policy", PolicySelect.MAX)
    if select not in PolicySelect.values:
        problems.append(f"{where}.select_policy must be one of {', '.join(PolicySelect.values)}.")
    policies = rules.get("policies")  # left out: Kubernetes' default policies for the direction
    if policies is not None and (not isinstance(policies, list) or (not policies and select != PolicySelect.DISABLED)):
        problems.append(f"{where}.policies must be a non-empty list unless select_policy is Disabled.")
    if not isinstance(policies, list):
        policies = []
    for i, policy in enumerate(policies):
        at = f"{where}.policies[{i}]"
        if not isinstance(policy, dict) or set(policy) != {"type", "value", "period_s"}:
            problems.append(f"{at} must be an object with exactly type, value and period_s.")
            continue
        if policy["type"] not in RatePolicyType.values:
            problems.append(f"{at}.type must be Percent or Pods.")
        if not _is_whole(policy["value"]) or policy["value"] <= 0:
            problems.append(f"{at}.value must be a whole number greater than 0.")
        if not _is_whole(policy["period_s"]) or not 0 < policy["period_s"] <= MAX_PERIOD_S:
            problems.append(f"{at}.period_s must be whole seconds from 1 to {MAX_PERIOD_S}.")
    return problems


def behavior_errors(behavior: Any, where: str = "behavior") -> list[str]:
    if not isinstance(behavior, dict):
        return [f"{where} must be an object with scale_up and/or scale_down."]
    problems = []
    unknown = set(behavior) - {"scale_up", "scale_down"}
    if unknown:
        problems.append(f"{where}: unknown keys {', '.join(sorted(unknown))}.")
    for direction in ("scale_up", "scale_down"):
        if direction in behavior:
            problems += rules_errors(behavior[direction], f"{where}.{direction}")
    return problems


def tolerance_errors(value: Any, where: str = "tolerance") -> list[str]:
    if value is None:
        return []
    if not _is_number(value) or not 0 <= value < 1:
        return [f"{where} must be a number from 0 up to (not including) 1."]
    return []


# --- parsing ----------------------------------------------------------------------------------------------


def rules_from_dict(data: dict | None, default: ScalingRules) -> ScalingRules:
    """A direction's behavior with Kubernetes' defaults for whatever is left out."""
    if not data:
        return default
    policies = data.get("policies")
    return ScalingRules(
        stabilization_window_s=data.get("stabilization_window_s", default.stabilization_window_s),
        select_policy=data.get("select_policy", default.select_policy),
        policies=default.policies if policies is None else tuple(
            RatePolicy(p["type"], p["value"], p["period_s"]) for p in policies),
    )


def replay_policy(data: Any) -> PoolPolicy:
    """The `policy` object of an `autoscale_replay` scenario; raises PolicyError naming every problem."""
    if not isinstance(data, dict):
        raise PolicyError(["policy must be an object."])
    problems = []
    allowed = {"min_replicas", "max_replicas", "tolerance", "metrics", "behavior", "slo", "scale_to_zero_after_s"}
    unknown = set(data) - allowed
    if unknown:
        problems.append(f"policy: unknown keys {', '.join(sorted(unknown))}.")
    low, high = data.get("min_replicas"), data.get("max_replicas")
    if not _is_whole(low) or low < 0:
        problems.append("policy.min_replicas must be a whole number, 0 or more.")
    if not _is_whole(high) or high < 1:
        problems.append("policy.max_replicas must be a whole number, 1 or more.")
    if _is_whole(low) and _is_whole(high) and low > high:
        problems.append(f"policy.min_replicas ({low}) must not exceed max_replicas ({high}).")
    problems += tolerance_errors(data.get("tolerance"), "policy.tolerance")
    metrics = data.get("metrics")
    if not isinstance(metrics, list) or not metrics:
        problems.append("policy.metrics must be a non-empty list of {name, target_per_replica}.")
        metrics = []
    for i, metric in enumerate(metrics):
        if not isinstance(metric, dict) or not isinstance(metric.get("name"), str) or not metric["name"]:
            problems.append(f"policy.metrics[{i}].name must be a non-empty string.")
        elif not _is_number(metric.get("target_per_replica")) or metric["target_per_replica"] <= 0:
            problems.append(f"policy.metrics[{i}].target_per_replica must be a number greater than 0.")
    if "behavior" in data:
        problems += behavior_errors(data["behavior"], "policy.behavior")
    slo = data.get("slo", {})
    if not isinstance(slo, dict) or set(slo) - set(SLO_TARGETS) or any(
            not _is_number(v) or v <= 0 for v in slo.values()):
        problems.append(f"policy.slo must map {' / '.join(SLO_TARGETS)} to numbers greater than 0.")
        slo = {}
    zero = data.get("scale_to_zero_after_s")
    if zero is not None and (not _is_whole(zero) or not 0 < zero <= MAX_WINDOW_S):
        problems.append(f"policy.scale_to_zero_after_s must be whole seconds from 1 to {MAX_WINDOW_S}.")
    if problems:
        raise PolicyError(problems)
    behavior = data.get("behavior", {})
    return PoolPolicy(
        min_replicas=low,
        max_replicas=high,
        metrics=tuple(MetricTarget(m["name"], float(m["target_per_replica"])) for m in metrics),
        tolerance=float(data.get("tolerance", DEFAULT_TOLERANCE)),
        scale_up=rules_from_dict(behavior.get("scale_up"), DEFAULT_SCALE_UP),
        scale_down=rules_from_dict(behavior.get("scale_down"), DEFAULT_SCALE_DOWN),
        ttft_p95_s=slo.get("ttft_p95_seconds"),
        itl_p95_s=slo.get("itl_p95_seconds"),
        scale_to_zero_after_s=zero,
    )


# --- the service spec ---------------------------------------------------------------------------------------


def role_targets(targets: dict, role: str) -> dict:
    """The service's targets that suit this pool's role (a prefill pool does not scale on KV usage)."""
    suited = ROLE_SIGNALS.get(role)
    if suited is None:
        return dict(targets)
    chosen = {k: v for k, v in targets.items() if k in suited}
    if not any(k in METRIC_FIGURES for k in chosen):
        chosen |= ROLE_DEFAULT_TARGETS[role]
    return chosen


def normalized_builtin(spec: dict, roles: list[str]) -> dict:
    """The stored policy with every default written out: tolerance, both behaviors (Kubernetes' defaults,
    or the legacy stabilization keys), and a `pools` entry per pool role with its targets."""
    out = dict(spec)
    behavior = dict(spec.get("behavior") or {})
    legacy = {"scale_up": "scale_up_stabilization_seconds", "scale_down": "scale_down_stabilization_seconds"}
    for direction, default in (("scale_up", DEFAULT_SCALE_UP), ("scale_down", DEFAULT_SCALE_DOWN)):
        given = dict(behavior.get(direction) or {})
        if spec.get(legacy[direction]) is not None and "stabilization_window_s" not in given:
            given["stabilization_window_s"] = spec[legacy[direction]]
        behavior[direction] = rules_from_dict(given, default).as_dict()
        out[legacy[direction]] = behavior[direction]["stabilization_window_s"]
    out["behavior"] = behavior
    out.setdefault("tolerance", DEFAULT_TOLERANCE)
    pools = dict(spec.get("pools") or {})
    for role in roles:
        entry = dict(pools.get(role) or {})
        entry.setdefault("targets", role_targets(spec.get("targets") or {}, role))
        pools[role] = entry
    out["pools"] = {role: pools[role] for role in sorted(pools) if role in roles}
    return out


def pool_policy(spec: dict, role: str, min_replicas: int, max_replicas: int) -> PoolPolicy:
    """The PoolPolicy of one pool from a (normalized or not) stored builtin spec."""
    spec = normalized_builtin(spec, [role])
    entry = spec["pools"][role]
    behavior = {**spec["behavior"], **(entry.get("behavior") or {})}
    targets = entry["targets"]
    return PoolPolicy(
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        metrics=tuple(MetricTarget(name, float(value)) for name, value in targets.items() if name in METRIC_FIGURES),
        tolerance=float(entry.get("tolerance", spec["tolerance"])),
        scale_up=rules_from_dict(behavior["scale_up"], DEFAULT_SCALE_UP),
        scale_down=rules_from_dict(behavior["scale_down"], DEFAULT_SCALE_DOWN),
        ttft_p95_s=targets.get("ttft_p95_seconds"),
        itl_p95_s=targets.get("itl_p95_seconds"),
        scale_to_zero_after_s=spec.get("scale_to_zero_after_seconds") if min_replicas == 0 else None,
    )
