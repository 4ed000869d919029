"""The quota controller of kube-controller-manager: keeps `status.hard` and `status.used` of every
ResourceQuota current. Admission against quotas is the API server's (kubesim/apiserver/admission/quota.py)."""

from __future__ import annotations

from kubesim.apiserver.admission.quota import QUOTAS, fmt_usage, namespace_usage_of
from kubesim.cluster.controllers.base import Controller, Informer, key_of
from kubesim.cluster.controllers.common import pod_active, write_status


def _as_usage(pod: dict) -> tuple:
    """Everything of a pod that its quota usage depends on."""
    return pod_active(pod), (pod.get("spec") or {}).get("containers"), (pod.get("spec") or {}).get("initContainers")


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
        used_units = namespace_usage_of(self.api.store).usage(key[0], sorted(hard))
        used = {item: fmt_usage(item, units) for item, units in used_units.items()}
        status = {"hard": hard, "used": used}
        await write_status(self.api, QUOTAS, self.quotas, quota, status)
