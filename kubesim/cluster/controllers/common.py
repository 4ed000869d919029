"""Helpers shared by the workload controllers: pod readiness, template hashing, conditions, pod creation."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import random
from datetime import UTC, datetime

from kubesim.apiserver.errors import ApiError
from kubesim.apiserver.objects import pod_active
from kubesim.cluster.controllers.base import owner_ref
from kubesim.cluster.events import now, parse_time

PODS = "v1/pods"
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery/pkg/util/rand


async def delete_pod(api, pods, pod: dict) -> None:
    """Delete a pod (one already gone is fine) and record the deletion in the pod informer at once, so
    the controller's next reconcile does not count the pod again."""
    meta = pod["metadata"]
    try:
        gone = await api.delete(PODS, meta["namespace"], meta["name"])
    except ApiError as error:
        if error.code != 404:
            raise
        gone = pod
    pods.apply("DELETED", gone)


async def write_status(api, resource: str, informer, obj: dict, status: dict) -> None:
    """Write `status` onto `obj` when it changed, and record the result in `informer` at once, so the
    controller's next reconcile starts from its own write."""
    if status == (obj.get("status") or {}):
        return
    result = await api.update_status(resource, {**obj, "status": status})
    if result is not None:
        informer.apply("MODIFIED", result)


def safe_encode(value: int, length: int) -> str:
    out = []
    for _ in range(length):
        value, digit = divmod(value, len(SAFE_ALPHABET))
        out.append(SAFE_ALPHABET[digit])
    return "".join(out)


def template_hash(template: dict, collision_count: int = 0) -> str:
    """A stable short hash of a pod template (the `pod-template-hash` label value)."""
    digest = hashlib.sha256((json.dumps(template, sort_keys=True) + str(collision_count)).encode()).digest()
    return safe_encode(int.from_bytes(digest[:8], "big"), 10)


def random_suffix(rng: random.Random, length: int = 5) -> str:
    return "".join(rng.choice(SAFE_ALPHABET) for _ in range(length))


def condition_true(obj: dict, kind: str) -> bool:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition.get("status") == "True"
    return False


def pod_ready(pod: dict) -> bool:
    return pod_active(pod) and condition_true(pod, "Ready")


def ready_since(pod: dict) -> datetime | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") == "True":
            return parse_time(condition.get("lastTransitionTime"))
    return None


def pod_available(pod: dict, min_ready_seconds: int) -> bool:
    """Ready for at least minReadySeconds."""
    if not pod_ready(pod):
        return False
    if not min_ready_seconds:
        return True
    since = ready_since(pod)
    return since is not None and (datetime.now(UTC) - since).total_seconds() >= min_ready_seconds


def set_condition(conditions: list[dict], kind: str, status: str, reason: str, message: str) -> list[dict]:
    """Replace or add a workload condition, keeping lastTransitionTime when the status did not change."""
    stamp = now()
    out = [dict(c) for c in conditions or [] if c.get("type") != kind]
    old = next((c for c in conditions or [] if c.get("type") == kind), None)
    transition = old.get("lastTransitionTime", stamp) if old and old.get("status") == status else stamp
    if old and old.get("status") == status and old.get("reason") == reason and old.get("message") == message:
        update = old.get("lastUpdateTime", stamp)
    else:
        update = stamp
    out.append(
        {
            "type": kind,
            "status": status,
            "lastUpdateTime": update,
            "lastTransitionTime": transition,
            "reason": reason,
            "message": message,
        }
    )
    order = {"Available": 0, "Progressing": 1, "ReplicaFailure": 2}
    out.sort(key=lambda c: order.get(c["type"], 9))
    return out


def drop_condition(conditions: list[dict], kind: str) -> list[dict]:
    return [c for c in conditions or [] if c.get("type") != kind]


def resolve_int_or_percent(value, total: int, round_up: bool, default: str) -> int:
    """maxSurge / maxUnavailable: an int, or a percent of `total` rounded up (surge) or down."""
    value = default if value is None else value
    if isinstance(value, str) and value.endswith("%"):
        share = float(value[:-1]) * total / 100
        return math.ceil(share) if round_up else math.floor(share)
    return int(value)


def pod_from_template(
    owner: dict, template: dict, name: str, extra_labels: dict | None = None, extra_annotations: dict | None = None
) -> dict:
    """A Pod built from a template, owned by `owner`."""
    template = copy.deepcopy(template or {})
    meta = template.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    labels.update(extra_labels or {})
    annotations = dict(meta.get("annotations") or {})
    annotations.update(extra_annotations or {})
    pod_meta = {
        "name": name,
        "namespace": owner["metadata"].get("namespace") or "default",
        "labels": labels,
        "ownerReferences": [owner_ref(owner)],
    }
    if annotations:
        pod_meta["annotations"] = annotations
    spec = template.get("spec") or {}
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec, "status": {"phase": "Pending"}}


def selector_matches(selector: dict | None, labels: dict) -> bool:
    """A LabelSelector (matchLabels and matchExpressions) against labels."""
    if not selector:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True
