"""ResourceQuota, a validating admission plugin of kube-apiserver: a pod creation that would exceed a
quota of its namespace is refused with 403 "exceeded quota" in the apiserver's words. The usage
arithmetic here is also what the quota controller (kubesim/cluster/controllers/quota.py) writes to
`status.used`."""

from __future__ import annotations

import weakref
from collections.abc import Callable

from ..errors import ApiError
from ..objects import pod_active
from ..quantities import format_units, pod_resources, to_units
from . import AdmissionRequest

POD_KEY = ("", "v1", "pods")
QUOTAS = "v1/resourcequotas"
PODS = "v1/pods"


def quota_name_to_usage_key(name: str) -> tuple[str, str] | None:
    """("requests"|"limits"|"count", resource) for a quota item name, None when kubesim does not track it."""
    if name == "pods":
        return ("count", "pods")
    if name.startswith(("requests.", "limits.")):
        kind, _, resource = name.partition(".")
        return (kind, resource)
    if name in ("cpu", "memory", "ephemeral-storage") or "/" in name:
        return ("requests", name)  # bare names mean requests
    return None


def pod_usage(pod: dict, items: list[str]) -> dict[str, int]:
    """What a pod charges against each quota item."""
    requests = pod_resources(pod, "requests")
    limits = pod_resources(pod, "limits")
    usage = {}
    for item in items:
        key = quota_name_to_usage_key(item)
        if key is None:
            continue
        kind, resource = key
        if kind == "count":
            usage[item] = 1
        else:
            usage[item] = (requests if kind == "requests" else limits).get(resource, 0)
    return usage


class NamespaceUsage:
    """What the active pods of each namespace charge against quotas (requests and limits by resource, and
    their count), kept as pods are committed: admitting a pod and the quota controller then cost the
    quota's items instead of a sum over every pod of the namespace, which made both quadratic in its size.
    One per store (`namespace_usage_of`); a snapshot restored into the store builds it again."""

    def __init__(self, store):
        self.totals: dict[str, dict[tuple[str, str], int]] = {}
        self.charged: dict[tuple[str, str], tuple[list, list, dict[tuple[str, str], int]]] = {}
        self._rebuild(store)
        store.on_change.append(lambda event: self._rebuild(store) if event is None else self._committed(event))

    def _rebuild(self, store) -> None:
        self.totals.clear()
        self.charged.clear()
        with store.raw_results():
            pods, _ = store.list(PODS)
        for pod in pods:
            self._charge(pod)

    def _committed(self, event) -> None:
        if event.gp != ("", "pods"):
            return
        if event.type == "DELETED" or not pod_active(event.obj):
            self._discharge(event.obj)
        else:
            self._charge(event.obj)

    def _discharge(self, pod: dict) -> None:
        meta = pod["metadata"]
        held = self.charged.pop((meta.get("namespace") or "", meta["name"]), None)
        if held is not None:
            totals = self.totals[meta.get("namespace") or ""]
            for key, units in held[2].items():
                totals[key] -= units

    def _charge(self, pod: dict) -> None:
        if not pod_active(pod):
            return
        meta, spec = pod["metadata"], pod.get("spec") or {}
        key = (meta.get("namespace") or "", meta["name"])
        containers, init = spec.get("containers") or [], spec.get("initContainers") or []
        held = self.charged.get(key)
        if held is not None and held[0] == containers and held[1] == init:
            return  # a status update: the same containers charge the same
        self._discharge(pod)
        charge = {("count", "pods"): 1}
        for kind in ("requests", "limits"):
            for resource, units in pod_resources(pod, kind).items():
                charge[(kind, resource)] = units
        self.charged[key] = (containers, init, charge)
        totals = self.totals.setdefault(key[0], {})
        for item, units in charge.items():
            totals[item] = totals.get(item, 0) + units

    def usage(self, namespace: str | None, items: list[str]) -> dict[str, int]:
        """What the namespace's active pods charge against each quota item kubesim tracks."""
        totals = self.totals.get(namespace or "") or {}
        return {item: totals.get(key, 0) for item in items if (key := quota_name_to_usage_key(item)) is not None}


_LEDGERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def namespace_usage_of(store) -> NamespaceUsage:
    """The store's NamespaceUsage, built on first use and kept current from then on."""
    ledger = _LEDGERS.get(store)
    if ledger is None:
        ledger = _LEDGERS[store] = NamespaceUsage(store)
    return ledger


def fmt_usage(item: str, units: int) -> str:
    """A quota item's usage in the apiserver's notation."""
    key = quota_name_to_usage_key(item)
    return format_units(key[1] if key else item, units)


def check_quota(pod: dict, quotas: list[dict], used_of: Callable[[list[str]], dict[str, int]]) -> None:
    """Raise the apiserver's 403 when creating `pod` would exceed a quota of its namespace."""
    name = pod["metadata"].get("name") or pod["metadata"].get("generateName", "")
    for quota in sorted(quotas, key=lambda q: q["metadata"]["name"]):
        hard = (quota.get("spec") or {}).get("hard") or {}
        items = sorted(hard)
        wanted = pod_usage(pod, items)
        for item in items:
            key = quota_name_to_usage_key(item)
            if key and key[0] in ("requests", "limits") and key[1] in ("cpu", "memory") and not wanted.get(item):
                raise ApiError.forbidden(
                    "pods", name, f"failed quota: {quota['metadata']['name']}: must specify {item}"
                )
        used = used_of(items)
        over = [
            item
            for item in items
            if item in wanted
            and wanted[item]
            and used.get(item, 0) + wanted[item] > to_units(quota_name_to_usage_key(item)[1], hard[item])
        ]
        if over:
            requested = ",".join(f"{item}={fmt_usage(item, wanted[item])}" for item in over)
            in_use = ",".join(f"{item}={fmt_usage(item, used.get(item, 0))}" for item in over)
            limited = ",".join(f"{item}={hard[item]}" for item in over)
            raise ApiError.forbidden(
                "pods",
                name,
                f"exceeded quota: {quota['metadata']['name']}, requested: {requested}, used: {in_use}, "
                f"limited: {limited}",
            )


def resource_quota(request: AdmissionRequest) -> None:
    """The plugin: refuses a pod creation that would exceed a quota of its namespace."""
    if request.operation != "CREATE" or request.resource.key != POD_KEY or request.object is None:
        return
    pod = request.object
    quotas, _ = request.store.list(QUOTAS, request.namespace)
    if not quotas:
        return
    ledger = namespace_usage_of(request.store)
    check_quota(pod, quotas, lambda items: ledger.usage(request.namespace, items))
