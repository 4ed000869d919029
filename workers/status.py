"""Reading a service's state back from its live objects: per-pool replicas, pods, reasons, phase.

Pure functions over the dicts the cluster returned, so the rules that decide Ready / Deploying /
Degraded / Failed are tested without a cluster. Failure messages read like advice: what the service
needs, and what the cluster has free.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from apps.serving.names import pod_role

CRASH_REASONS = {"CrashLoopBackOff", "Error", "OOMKilled", "CreateContainerConfigError", "ImagePullBackOff",
                 "ErrImagePull", "RunContainerError"}


@dataclass
class PodView:
    name: str
    role: str
    phase: str
    ready: bool
    node: str
    reason: str = ""
    message: str = ""
    restarts: int = 0
    gpus: int = 0
    container: str = ""  # the container the reason is about


@dataclass
class PoolView:
    role: str
    desired: int
    ready: int = 0
    updated: int = 0
    available: int = 0


@dataclass
class ServiceView:
    """What the reconciler learned about a service in one pass."""

    pools: dict[str, PoolView]
    pods: list[PodView] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    unschedulable: list[str] = field(default_factory=list)
    crashing: list[str] = field(default_factory=list)

    @property
    def ready_replicas(self) -> int:
        return sum(p.ready for p in self.pools.values())

    @property
    def all_ready(self) -> bool:
        return all(p.ready >= p.desired and p.updated >= p.desired for p in self.pools.values())


def pod_view(pod: dict) -> PodView:
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    statuses = status.get("containerStatuses") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    reason, message, restarts, crashed = "", "", 0, ""
    for cs in statuses:
        restarts += cs.get("restartCount", 0)
        waiting = (cs.get("state") or {}).get("waiting") or {}
        terminated = (cs.get("lastState") or {}).get("terminated") or {}
        if waiting.get("reason") and not reason:
            reason, message = waiting["reason"], waiting.get("message", "") or terminated.get("message", "")
            crashed = cs.get("name", "")
    if not reason:
        for cond in status.get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                reason, message = cond.get("reason", "Unschedulable"), cond.get("message", "")
    gpus = 0
    for container in spec.get("containers", []):
        limits = (container.get("resources") or {}).get("limits") or {}
        for key, value in limits.items():
            if key.endswith(".com/gpu"):
                gpus += int(str(value))
    return PodView(
        name=meta.get("name", ""), role=pod_role(meta.get("labels") or {}), phase=status.get("phase", "Pending"),
        ready=ready, node=spec.get("nodeName") or "", reason=reason, message=message, restarts=restarts, gpus=gpus,
        container=crashed,
    )


def workload_counts(obj: dict) -> tuple[int, int, int]:
    """(ready, updated, available) replicas of a Deployment or LeaderWorkerSet status."""
    status = obj.get("status") or {}
    ready = status.get("readyReplicas", 0) or 0
    updated = status.get("updatedReplicas", ready) or 0
    available = status.get("availableReplicas", ready) or 0
    return ready, updated, available


def service_view(desired_pools: dict[str, int], workloads: list[dict], pods: list[dict],
                 events: list[dict]) -> ServiceView:
    """Combine live workloads, pods and events into per-pool counts and failure reasons."""
    view = ServiceView(pools={role: PoolView(role, n) for role, n in desired_pools.items()})
    for obj in workloads:
        role = pod_role(obj.get("metadata", {}).get("labels") or {})
        role = "leader" if obj.get("kind") == "LeaderWorkerSet" and role not in view.pools else role
        if role in view.pools:
            pool = view.pools[role]
            pool.ready, pool.updated, pool.available = workload_counts(obj)
            # A workload whose controller has not seen the new spec yet is not updated.
            observed = (obj.get("status") or {}).get("observedGeneration")
            if observed is not None and observed < obj.get("metadata", {}).get("generation", 0):
                pool.updated = 0
    view.pods = sorted((pod_view(p) for p in pods), key=lambda p: p.name)
    owned = {p.name for p in view.pods} | {w.get("metadata", {}).get("name", "") for w in workloads}
    view.events = sorted(
        (e for e in events if _concerns(e.get("involvedObject") or {}, owned)),
        key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "",
    )[-50:]
    for pod in view.pods:
        if pod.phase == "Pending" and not pod.node:
            msg = pod.message or next(
                (e.get("message", "") for e in reversed(view.events)
                 if e.get("reason") == "FailedScheduling" and e["involvedObject"].get("name") == pod.name), "")
            if msg:
                view.unschedulable.append(f"{pod.name}: {msg}")
        if pod.reason in CRASH_REASONS:
            view.crashing.append(f"{pod.name}: {pod.reason}" + (f" ({pod.message})" if pod.message else ""))
    return view


def _concerns(involved: dict, owned: set[str]) -> bool:
    """An event is the service's when it names one of its pods or workloads, or a ReplicaSet of one
    (`<deployment>-<hash>`, the hash having no dash)."""
    name = involved.get("name", "")
    if name in owned:
        return True
    base, _, suffix = name.rpartition("-")
    return involved.get("kind") == "ReplicaSet" and base in owned and suffix.isalnum()


_ERROR_LINE = re.compile(r"\b[\w.]*(Error|Exception)\b:")


def last_error_line(log: str) -> str:
    """The engine's last error line in a container log (a Python exception line such as
    `torch.OutOfMemoryError: CUDA out of memory ...`), else its last non-empty line."""
    lines = [line.strip() for line in (log or "").splitlines() if line.strip()]
    for line in reversed(lines):
        match = _ERROR_LINE.search(line)
        if match:
            return line[match.start():]
    return lines[-1] if lines else ""


def crashing_pod(view: ServiceView) -> PodView | None:
    """The first pod whose container crash-loops (or failed in another way CRASH_REASONS names)."""
    return next((p for p in view.pods if p.reason in CRASH_REASONS), None)


def gpu_advice(gpus_per_replica: int, product: str, nodes: list[dict]) -> str:
    """'needs 2 × NVIDIA-L4 per replica; 0 of 4 NVIDIA-L4 nodes have 2 free' from the node inventory."""
    matching = [n for n in nodes if n["gpu_product"] == product]
    fitting = [n for n in matching if n["allocatable"] - n["allocated"] >= gpus_per_replica]
    if not matching:
        return f"needs {gpus_per_replica} × {product} per replica; the cluster has no {product} nodes"
    return (f"needs {gpus_per_replica} × {product} per replica; {len(fitting)} of {len(matching)} "
            f"{product} nodes have {gpus_per_replica} free")


def now_iso() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def condition(ctype: str, ok: bool, reason: str, message: str = "", previous: list[dict] | None = None) -> dict:
    """A Kubernetes-style condition; lastTransitionTime moves only when the status flips."""
    status = "True" if ok else "False"
    before = next((c for c in previous or [] if c.get("type") == ctype), None)
    since = before["lastTransitionTime"] if before and before.get("status") == status else now_iso()
    return {"type": ctype, "status": status, "reason": reason, "message": message, "lastTransitionTime": since}


def autoscaler_rows(objects: list[dict]) -> list[dict]:
    """Live HPA / KEDA ScaledObject status for the service page: replicas, bounds, metrics, conditions."""
    rows = []
    for obj in objects:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        rows.append({
            "kind": obj.get("kind"), "name": (obj.get("metadata") or {}).get("name", ""),
            "target": (spec.get("scaleTargetRef") or {}).get("name", ""),
            "min": spec.get("minReplicas", spec.get("minReplicaCount")),
            "max": spec.get("maxReplicas", spec.get("maxReplicaCount")),
            "current": status.get("currentReplicas"), "desired": status.get("desiredReplicas"),
            "last_scale": status.get("lastScaleTime"),
            "metrics": [_metric_row(m) for m in status.get("currentMetrics") or []],
            "conditions": [{k: c.get(k, "") for k in ("type", "status", "reason", "message")}
                           for c in status.get("conditions") or []],
        })
    return sorted(rows, key=lambda r: (r["kind"], r["name"]))


def _metric_row(metric: dict) -> str:
    """'vllm_num_requests_waiting: 3' from an HPA status metric (Pods, Object, External or Resource)."""
    body = metric.get(str(metric.get("type", "")).lower().replace("containerresource", "containerResource")) or {}
    name = (body.get("metric") or {}).get("name") or body.get("name") or metric.get("type", "")
    current = body.get("current") or {}
    value = current.get("averageValue") or current.get("value") or current.get("averageUtilization")
    return f"{name}: {value}"
