"""The delete verb as the API server does it; what follows a deletion is the controllers' (kubesim/cluster).

`DeletionMixin` gives the Store `delete`: preconditions, Background/Foreground/Orphan propagation recorded as
the `foregroundDeletion`/`orphan` finalizers, `deletionTimestamp` while finalizers remain, and removal once
the last one is gone. A namespace is marked Terminating and kept while `spec.finalizers` holds
`kubernetes`; the namespace controller empties it, finalizes it and deletes it again. Dependents are
left to the garbage collector (kubesim/cluster/controllers/garbagecollector.py), as kube-controller-manager
runs it. Only a CRD's own objects go with the CRD here, as apiextensions-apiserver removes them.
"""

from __future__ import annotations

from .errors import ApiError
from .objects import _without_times, clone, now_rfc3339
from .resources import ResourceType

PROTECTED_NAMESPACES = ("default", "kube-system", "kube-public")
NAMESPACES = ("", "v1", "namespaces")


class DeletionMixin:
    """The delete verb and namespace finalization; mixed into kubesim.apiserver.store.Store."""

    def delete(self, resource, namespace: str | None, name: str, *, propagation_policy: str | None = None,
               preconditions: dict | None = None, dry_run: bool = False) -> tuple[dict, bool]:
        """Delete with Background (default), Foreground or Orphan propagation and finalizers.

        Returns the object's last state and whether it is gone now (False: deletion pending finalizers).
        """
        rt = self.resource(resource)
        ns = self._ns(rt, namespace)
        old = self._current(rt, ns, name)
        self._check_preconditions(rt, name, old["metadata"], preconditions or {})
        is_namespace = rt.key == NAMESPACES
        if is_namespace and name in PROTECTED_NAMESPACES:
            raise ApiError.forbidden("namespaces", name, "this namespace may not be deleted", "", "namespaces")
        policy = propagation_policy or "Background"
        if policy not in ("Background", "Foreground", "Orphan"):
            raise ApiError.bad_request(f"unsupported propagation policy {policy!r}")
        if is_namespace and old["metadata"].get("deletionTimestamp") and (old.get("spec") or {}).get("finalizers"):
            raise ApiError(409, "Conflict", "The system is ensuring all content is removed from this namespace.  "
                           "Upon completion, this namespace will automatically be purged by the system.",
                           {"name": name, "kind": "namespaces"})
        self._admit("DELETE", rt, ns, name, None, old, None, dry_run)
        if dry_run:
            return self.present(rt, old), False
        finalizers = list(old["metadata"].get("finalizers") or [])
        wanted = {"Orphan": "orphan", "Foreground": "foregroundDeletion"}.get(policy)
        if wanted and wanted not in finalizers:
            finalizers.append(wanted)
        held_by_spec = is_namespace and bool((old.get("spec") or {}).get("finalizers"))
        if not finalizers and not held_by_spec:
            return self.present(rt, self._remove(rt, ns, name, old=old)), True
        new = clone(old)
        nmeta = new["metadata"]
        if finalizers:
            nmeta["finalizers"] = finalizers
        if not nmeta.get("deletionTimestamp"):
            nmeta["deletionTimestamp"] = now_rfc3339()
            nmeta["deletionGracePeriodSeconds"] = 0
        if is_namespace:
            new["status"] = dict(new.get("status") or {}, phase="Terminating")
        if _without_times(new) != _without_times(old):
            new = self._commit(rt, ns, name, new, old, "MODIFIED")
        return self.present(rt, new), False

    @staticmethod
    def _check_preconditions(rt: ResourceType, name: str, ometa: dict, pre: dict) -> None:
        details = {"name": name, "group": rt.group, "kind": rt.plural}
        if pre.get("uid") and pre["uid"] != ometa["uid"]:
            raise ApiError(409, "Conflict",
                           f'Operation cannot be fulfilled on {rt.group_resource} "{name}": Precondition failed: '
                           f"UID in precondition: {pre['uid']}, UID in object meta: {ometa['uid']}", details)
        if pre.get("resourceVersion") and pre["resourceVersion"] != ometa["resourceVersion"]:
            raise ApiError(409, "Conflict",
                           f'Operation cannot be fulfilled on {rt.group_resource} "{name}": the ResourceVersion '
                           f"in the precondition ({pre['resourceVersion']}) does not match the ResourceVersion "
                           f"in record ({ometa['resourceVersion']}). The object might have been modified",
                           details)

    def finalize_namespace(self, name: str, finalizers: list[str]) -> dict:
        """PUT /api/v1/namespaces/{name}/finalize: set `spec.finalizers` (what the namespace controller calls)."""
        rt = self.registry.get(*NAMESPACES)
        old = self._current(rt, None, name)
        new = clone(old)
        new.setdefault("spec", {})["finalizers"] = list(finalizers)
        if new == old:
            return self.present(rt, old)
        self._admit("UPDATE", rt, None, name, new, old, "finalize", False)
        return self.present(rt, self._commit(rt, None, name, new, old, "MODIFIED"))

    def _remove(self, rt: ResourceType, ns, name: str, old: dict) -> dict:
        """Remove for real (DELETED); a CRD takes its objects with it."""
        gone = self._commit(rt, ns, name, None, old, "DELETED")
        if rt.kind == "CustomResourceDefinition" and rt.group == "apiextensions.k8s.io":
            self._unserve_crd(old)
        return gone

    def _unserve_crd(self, crd: dict) -> None:
        spec = crd.get("spec") or {}
        group, plural = spec.get("group"), (spec.get("names") or {}).get("plural")
        bucket = self._objects.get((group, plural), {})
        rts = [rt for rt in self.registry.all() if rt.custom and (rt.group, rt.plural) == (group, plural)]
        if rts:
            for ns, name in list(bucket):
                obj = bucket.get((ns, name))
                if obj is not None:
                    final = clone(obj)
                    final["metadata"].pop("finalizers", None)
                    self._remove(rts[0], ns, name, old=final)
        for rt in rts:
            self.registry.remove(rt.key)
