"""The shape of a service's autoscaling policy (stored as JSON on InferenceService.autoscaling).

{"autoscaler": "builtin|hpa|keda|none",
 "targets": {"waiting_requests_per_replica": 4, "kv_cache_usage": 0.8, "ttft_p95_seconds": 1.5,
             "running_requests_per_replica": 32},
 "scale_up_stabilization_seconds": 0, "scale_down_stabilization_seconds": 300,
 "scale_to_zero_after_seconds": 600}
"""

from __future__ import annotations

from typing import Any

from apps.serving.choices import Autoscaler

TARGETS: dict[str, tuple[float, float | None]] = {
    # name -> (exclusive lower bound, inclusive upper bound or None)
    "waiting_requests_per_replica": (0, None),
    "running_requests_per_replica": (0, None),
    "kv_cache_usage": (0, 1),
    "ttft_p95_seconds": (0, None),
}
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
    unknown = set(spec) - {"autoscaler", "targets", *WINDOWS}
    if unknown:
        problems.append(f"Unknown autoscaling keys: {', '.join(sorted(unknown))}.")
    autoscaler = spec.get("autoscaler", Autoscaler.NONE)
    if autoscaler not in Autoscaler.values:
        problems.append(f"autoscaler {autoscaler!r} is not one of {', '.join(Autoscaler.values)}.")
    targets = spec.get("targets", {})
    if not isinstance(targets, dict):
        problems.append("targets must be an object of metric name to target value.")
        targets = {}
    for name, value in targets.items():
        if name not in TARGETS:
            problems.append(f"targets.{name} is not a known metric ({', '.join(sorted(TARGETS))}).")
            continue
        low, high = TARGETS[name]
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or value <= low
            or (high is not None and value > high)
        ):
            bound = f"in ({low}, {high}]" if high is not None else f"greater than {low}"
            problems.append(f"targets.{name} must be a number {bound}.")
    if autoscaler in (Autoscaler.BUILTIN, Autoscaler.HPA, Autoscaler.KEDA) and not targets:
        problems.append(f"The {autoscaler} autoscaler needs at least one target.")
    for name in WINDOWS:
        value = spec.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            problems.append(f"{name} must be a whole number of seconds, 0 or more.")
    if spec.get("scale_to_zero_after_seconds") is not None and not serverless:
        problems.append("scale_to_zero_after_seconds applies to serverless services only.")
    return problems
