"""ResourceQuota, a validating admission plugin of kube-apiserver: a pod creation that would exceed a
quota of its namespace is refused with 403 "exceeded quota" in the apiserver's words. The usage
arithmetic here is also what the quota controller (kubesim/cluster/controllers/quota.py) writes to
`status.used`."""

from __future__ import annotations

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
            for item, units in _memo_usage(pod, items).items():  # summed in place: a namespace is thousands
                total[item] = total.get(item, 0) + units
    return total


def fmt_usage(item: str, units: int) -> str:
    """A quota item's usage in the apiserver's notation."""
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
    # Read-only: the namespace's pods uncopied (copying them all for every pod created made admission
    # quadratic in the size of a namespace).
    with request.store.raw_results():
        pods, _ = request.store.list(PODS, request.namespace)
        check_quota(pod, quotas, pods)
