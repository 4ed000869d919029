"""Resource quantities and pod resource arithmetic for kubesim's scheduler, quota and kubelet.

CPU is counted in millicores, memory and storage in bytes, extended resources (nvidia.com/gpu) as
whole units, all as plain integers so sums and comparisons are exact.
"""

from __future__ import annotations

import math
import re

_SUFFIXES = {
    "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4, "Pi": 1024**5, "Ei": 1024**6,
    "n": 10**-9, "u": 10**-6, "m": 10**-3, "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")


def parse_quantity(value: str | int | float) -> float:
    """The numeric value of a Kubernetes quantity ("500m" -> 0.5, "16Gi" -> 17179869184)."""
    if isinstance(value, int | float):
        return float(value)
    match = _QUANTITY.match(str(value).strip())
    if not match:
        raise ValueError(f"quantities must match the regular expression '{_QUANTITY.pattern}'")
    number, suffix = match.groups()
    return float(number) * _SUFFIXES[suffix or ""]


def to_units(resource: str, value: str | int | float) -> int:
    """A quantity as the integer unit kubesim counts `resource` in (millicores for cpu, else ceil)."""
    amount = parse_quantity(value)
    if resource == "cpu" or resource.endswith(".cpu"):
        return math.ceil(round(amount * 1000, 6))
    return math.ceil(round(amount, 6))


def format_units(resource: str, units: int) -> str:
    """The canonical quantity string for an integer amount of `resource` (inverse of to_units)."""
    if resource == "cpu" or resource.endswith(".cpu"):
        return str(units // 1000) if units % 1000 == 0 else f"{units}m"
    if resource.endswith(("memory", "ephemeral-storage")):
        for suffix, factor in (("Gi", 1024**3), ("Mi", 1024**2), ("Ki", 1024)):
            if units and units % factor == 0:
                return f"{units // factor}{suffix}"
    return str(units)


def add(total: dict[str, int], extra: dict[str, int]) -> dict[str, int]:
    """Sum two resource maps into a new one."""
    out = dict(total)
    for name, units in extra.items():
        out[name] = out.get(name, 0) + units
    return out


def _container_resources(container: dict, kind: str) -> dict[str, int]:
    resources = container.get("resources") or {}
    values = dict(resources.get("limits") or {}) if kind == "requests" else {}
    # A container that sets only limits gets requests equal to them (apiserver defaulting).
    values.update(resources.get(kind) or {})
    return {name: to_units(name, quantity) for name, quantity in values.items()}


def pod_resources(pod: dict, kind: str = "requests") -> dict[str, int]:
    """Effective `requests` (or `limits`) of a pod: max(containers' sum, any init container)."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        total = add(total, _container_resources(container, kind))
    for container in spec.get("initContainers") or []:
        for name, units in _container_resources(container, kind).items():
            total[name] = max(total.get(name, 0), units)
    for name, quantity in (spec.get("overhead") or {}).items():
        total[name] = total.get(name, 0) + to_units(name, quantity)
    return total


def pod_requests(pod: dict) -> dict[str, int]:
    """What the scheduler reserves on a node for `pod`."""
    return pod_resources(pod, "requests")


def node_allocatable(node: dict) -> dict[str, int]:
    """A node's allocatable resources in kubesim units."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return {name: to_units(name, quantity) for name, quantity in allocatable.items()}
