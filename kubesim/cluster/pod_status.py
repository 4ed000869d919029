"""A pod's Ready conditions as the kubelet writes them (kubesim.cluster.pod_runtime keeps the state)."""

from __future__ import annotations


def pod_ready_conditions(ready: bool, reason: str | None, stamp: str, previous: list[dict]) -> list[dict]:
    """PodScheduled, PodReadyToStartContainers, Initialized, ContainersReady and Ready conditions."""
    before = {c.get("type"): c for c in previous}

    def condition(kind: str, ok: bool, why: str | None = None, message: str | None = None) -> dict:
        status = "True" if ok else "False"
        old = before.get(kind)
        moved = old is None or old.get("status") != status
        out = {
            "type": kind,
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": stamp if moved else old.get("lastTransitionTime", stamp),
        }
        if why and not ok:
            out["reason"] = why
        if message and not ok:
            out["message"] = message
        return out

    return [
        condition("PodReadyToStartContainers", True),
        condition("Initialized", True),
        condition("Ready", ready, reason, "containers with unready status" if reason else None),
        condition("ContainersReady", ready, reason, "containers with unready status" if reason else None),
        condition("PodScheduled", True),
    ]
