"""The shape of a service's autoscaling policy (stored as JSON on InferenceService.autoscaling).

{"autoscaler": "builtin|hpa|keda|none",
 "targets": {"waiting_requests_per_replica": 4, "kv_cache_usage": 0.8, "ttft_p95_seconds": 1.5,
             "running_requests_per_replica": 32},
 "scale_up_stabilization_seconds": 0, "scale_down_stabilization_seconds": 300,
 "scale_to_zero_after_seconds": 600,
 "when_idle": "delete|sleep|auto", "sleep_level": 1, "wake_objective_seconds": 10,  # serving/idle_spec.py
 # built-in autoscaler only (defaults filled in on save, see apps.autoscaling.policy):
 "tolerance": 0.1,
 "behavior": {"scale_up": {"stabilization_window_s", "select_policy", "policies": [{type, value, period_s}]},
              "scale_down": {...}},
 "pools": {"prefill": {"targets": {...}, "tolerance": 0.1, "behavior": {...}}, "decode": {...}}}

Replica bounds live on the pools (min_replicas, max_replicas); min 0 is for serverless services only.
"""

from __future__ import annotations

import copy
from typing import Any

from apps.serving.choices import Autoscaler, PoolRole
from apps.serving.idle_spec import IDLE_KEYS, idle_errors
from apps.serving.scaling_policy import MAX_WINDOW_S, behavior_errors, role_targets, tolerance_errors

TARGETS: dict[str, tuple[float, float | None]] = {
    # name -> (exclusive lower bound, inclusive upper bound or None)
    "waiting_requests_per_replica": (0, None),
    "running_requests_per_replica": (0, None),
    "kv_cache_usage": (0, 1),
    "prompt_tokens_per_s_per_replica": (0, None),
    "generation_tokens_per_s_per_replica": (0, None),
    "ttft_p95_seconds": (0, None),
    "itl_p95_seconds": (0, None),
}
BUILTIN_KEYS = {"tolerance", "behavior", "pools"}
WINDOWS = (
    "scale_up_stabilization_seconds",
    "scale_down_stabilization_seconds",
    "scale_to_zero_after_seconds",
)


def autoscaling_errors(spec: Any, *, serverless: bool) -> list[str]:
    """Readable problems with an autoscaling policy; empty when it is valid."""
    if not isinstance(spec, dict):
        return ["Autoscaling must be an object."]
    problems: list[str] = []
    unknown = set(spec) - {"autoscaler", "targets", *WINDOWS, *BUILTIN_KEYS, *IDLE_KEYS}
    if unknown:
        problems.append(f"Unknown autoscaling keys: {', '.join(sorted(unknown))}.")
    autoscaler = spec.get("autoscaler", Autoscaler.NONE)
    if autoscaler not in Autoscaler.values:
        problems.append(f"autoscaler {autoscaler!r} is not one of {', '.join(Autoscaler.values)}.")
    targets = spec.get("targets", {})
    problems += _target_errors(targets, "targets")
    if autoscaler in (Autoscaler.BUILTIN, Autoscaler.HPA, Autoscaler.KEDA) and not targets:
        problems.append(f"The {autoscaler} autoscaler needs at least one target.")
    for name in WINDOWS:
        value = spec.get(name)
        whole = isinstance(value, int) and not isinstance(value, bool)
        if value is not None and (not whole or not 0 <= value <= MAX_WINDOW_S):
            problems.append(f"{name} must be a whole number of seconds from 0 to {MAX_WINDOW_S} (1 h).")
    if spec.get("scale_to_zero_after_seconds") is not None and not serverless:
        problems.append("scale_to_zero_after_seconds applies to serverless services only.")
    problems += idle_errors(spec, serverless=serverless)
    if set(spec) & BUILTIN_KEYS and autoscaler != Autoscaler.BUILTIN:
        problems.append(f"{', '.join(sorted(set(spec) & BUILTIN_KEYS))} apply to the builtin autoscaler only.")
    problems += tolerance_errors(spec.get("tolerance"))
    if "behavior" in spec:
        problems += behavior_errors(spec["behavior"])
    pools = spec.get("pools", {})
    if not isinstance(pools, dict):
        return [*problems, "pools must be an object of pool role to {targets, tolerance, behavior}."]
    for role, entry in pools.items():
        at = f"pools.{role}"
        if role not in PoolRole.values:
            problems.append(f"{at}: {role!r} is not a pool role ({', '.join(PoolRole.values)}).")
            continue
        if not isinstance(entry, dict) or set(entry) - {"targets", "tolerance", "behavior"}:
            problems.append(f"{at} must be an object with targets, tolerance and/or behavior.")
            continue
        problems += _target_errors(entry.get("targets", {}), f"{at}.targets")
        problems += tolerance_errors(entry.get("tolerance"), f"{at}.tolerance")
        if "behavior" in entry:
            problems += behavior_errors(entry["behavior"], f"{at}.behavior")
    return problems


def _target_errors(targets: Any, where: str) -> list[str]:
    if not isinstance(targets, dict):
        return [f"{where} must be an object of metric name to target value."]
    problems = []
    for name, value in targets.items():
        if name not in TARGETS:
            problems.append(f"{where}.{name} is not a known metric ({', '.join(sorted(TARGETS))}).")
            continue
        low, high = TARGETS[name]
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or value <= low
            or (high is not None and value > high)
        ):
            bound = f"in ({low}, {high}]" if high is not None else f"greater than {low}"
            problems.append(f"{where}.{name} must be a number {bound}.")
    return problems


def merged_policy(stored: Any, shown: dict) -> dict:
    """`shown` (the autoscaler, the service-wide targets and the windows, as a form edits them) applied onto the
    `stored` policy, keeping everything it does not cover: tolerance, behavior rates and per-pool settings.

    A form that rebuilt the policy from its own fields would reset settings made through the API to the defaults
    on every save. Two values are mirrored where they take effect: a changed stabilization window also moves
    the builtin behavior's window, and per-pool targets that were only derived from the old service-wide targets
    are derived again from the new ones (custom ones stay). Builtin-only keys go when the autoscaler is no longer
    builtin, as `autoscaling_errors` refuses them on any other autoscaler.
    """
    out = copy.deepcopy(stored) if isinstance(stored, dict) else {}
    old_targets = out.get("targets") if isinstance(out.get("targets"), dict) else {}
    old_windows = {name: out.get(name) for name in WINDOWS}
    out["autoscaler"] = shown.get("autoscaler") or Autoscaler.NONE
    new_targets = {k: v for k, v in (shown.get("targets") or {}).items() if v is not None}
    if new_targets:
        out["targets"] = new_targets
    else:
        out.pop("targets", None)
    for name in WINDOWS:
        if shown.get(name) is not None:
            out[name] = shown[name]
        else:
            out.pop(name, None)
    if out["autoscaler"] != Autoscaler.BUILTIN:
        for key in BUILTIN_KEYS:
            out.pop(key, None)
        return out
    behavior = out.get("behavior")
    for name, direction in (("scale_up_stabilization_seconds", "scale_up"),
                            ("scale_down_stabilization_seconds", "scale_down")):
        rules = behavior.get(direction) if isinstance(behavior, dict) else None
        if shown.get(name) is not None and shown[name] != old_windows[name] and isinstance(rules, dict):
            rules["stabilization_window_s"] = shown[name]
    pools = out.get("pools")
    if new_targets != old_targets and isinstance(pools, dict):
        for role, entry in pools.items():
            if isinstance(entry, dict) and entry.get("targets") == role_targets(old_targets, role):
                entry.pop("targets")
    return out
