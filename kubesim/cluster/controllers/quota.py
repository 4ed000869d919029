"""ResourceQuota: admission at pod creation (403 "exceeded quota" in the apiserver's words) and the
quota controller that keeps `status.hard` and `status.used` current.

Also hosts the ExtendedResourceToleration admission plugin: pods requesting `nvidia.com/gpu` get a
toleration for the GPU taint, as on GKE and AKS, so a GPU request alone is enough to land on GPU nodes.
"""

from __future__ import annotations

from kubesim.apiserver.errors import ApiError
from kubesim.apiserver.quantities import add, format_units, pod_resources, to_units
from kubesim.cluster.controllers.base import Controller, Informer, key_of
from kubesim.cluster.controllers.common import pod_active, write_status
from kubesim.cluster.placement import extended_resource_tolerations

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


def _as_usage(pod: dict) -> tuple:
    """Everything of a pod that its quota usage depends on."""
    return pod_active(pod), (pod.get("spec") or {}).get("containers"), (pod.get("spec") or {}).get("initContainers")


# A pod's usage by (uid, resourceVersion, quota items): admission and the controller sum a whole
# namespace for every pod created, and parsing every pod's quantities each time made that quadratic.
_usage_memo: dict[tuple, dict[str, int]] = {}
_USAGE_MEMO_SIZE = 200_000


def _memo_usage(pod: dict, items: list[str]) -> dict[str, int]:
    meta = pod.get("metadata") or {}
    if not meta.get("uid") or not meta.get("resourceVersion"):
        return pod_usage(pod, items)  # not stored yet: nothing identifies this version of it
    key = (meta["uid"], meta["resourceVersion"], tuple(items))
    usage = _usage_memo.get(key)
    if usage is None:
        if len(_usage_memo) >= _USAGE_MEMO_SIZE:
            _usage_memo.clear()
        usage = _usage_memo[key] = pod_usage(pod, items)
    return usage


def namespace_usage(pods: list[dict], items: list[str]) -> dict[str, int]:
    total = {item: 0 for item in items if quota_name_to_usage_key(item) is not None}
    for pod in pods:
        if pod_active(pod):
            total = add(total, _memo_usage(pod, items))
    return total


def _fmt(item: str, units: int) -> str:
    key = quota_name_to_usage_key(item)
    return format_units(key[1] if key else item, units)


def check_quota(pod: dict, quotas: list[dict], pods: list[dict]) -> None:
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
        used = namespace_usage(pods, items)
        over = [
            item
            for item in items
            if item in wanted
            and wanted[item]
            and used.get(item, 0) + wanted[item] > to_units(quota_name_to_usage_key(item)[1], hard[item])
        ]
        if over:
            requested = ",".join(f"{item}={_fmt(item, wanted[item])}" for item in over)
            in_use = ",".join(f"{item}={_fmt(item, used.get(item, 0))}" for item in over)
            limited = ",".join(f"{item}={hard[item]}" for item in over)
            raise ApiError.forbidden(
                "pods",
                name,
                f"exceeded quota: {quota['metadata']['name']}, requested: {requested}, used: {in_use}, "
                f"limited: {limited}",
            )


def pod_admission(request) -> None:
    """Admission hook: GPU tolerations, then quota, for pod creations."""
    if request.operation != "CREATE" or request.resource.key != ("", "v1", "pods") or request.object is None:
        return
    pod = request.object
    added = extended_resource_tolerations(pod)
    if added:
        pod.setdefault("spec", {}).setdefault("tolerations", []).extend(added)
    quotas, _ = request.store.list(QUOTAS, request.namespace)
    if not quotas:
        return
    # Read-only: the namespace's pods uncopied (copying them all for every pod created made admission
    # quadratic in the size of a namespace).
    with request.store.raw_results():
        pods, _ = request.store.list(PODS, request.namespace)
        check_quota(pod, quotas, pods)


class QuotaController(Controller):
    """Keeps `status.hard` and `status.used` of every ResourceQuota current."""

    name = "resourcequota-controller"

    def __init__(self, api, quotas: Informer, pods: Informer):
        super().__init__()
        self.api, self.quotas, self.pods = api, quotas, pods
        quotas.handlers.append(lambda _t, quota, _old: self.enqueue(key_of(quota)))
        pods.handlers.append(self._pod_changed)

    def _pod_changed(self, event_type: str, pod: dict, old: dict | None) -> None:
        if event_type == "MODIFIED" and old is not None and _as_usage(pod) == _as_usage(old):
            return  # most pod updates (container states) change nothing a quota counts
        namespace = pod["metadata"].get("namespace") or ""
        for quota in self.quotas.list(namespace):
            self.enqueue(key_of(quota))

    async def reconcile(self, key) -> None:
        quota = self.quotas.get(*key)
        if quota is None:
            return
        hard = dict((quota.get("spec") or {}).get("hard") or {})
        used_units = namespace_usage(self.pods.list(key[0]), sorted(hard))
        used = {item: _fmt(item, units) for item, units in used_units.items()}
        status = {"hard": hard, "used": used}
        await write_status(self.api, QUOTAS, self.quotas, quota, status)
