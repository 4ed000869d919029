"""Deletion and garbage collection, as the apiserver and kube-controller-manager do them.

`DeletionMixin` gives the Store `delete` with Background/Foreground/Orphan propagation, finalizers and
`deletionTimestamp`, collection of dependents by ownerReference uid, namespace draining, and the removal of
a CRD's objects when the CRD goes away. It relies on the Store's indexes (`_by_uid`, `_dependents`).
"""

from __future__ import annotations

import asyncio

from .errors import ApiError
from .objects import _without_times, clone, now_rfc3339
from .resources import ResourceType

PROTECTED_NAMESPACES = ("default", "kube-system", "kube-public")
GC_MANAGER = "kube-controller-manager"


class DeletionMixin:
    """The delete verb and the garbage collector; mixed into kubesim.apiserver.store.Store."""

    def delete(self, resource, namespace: str | None, name: str, *, propagation_policy: str | None = None,
               preconditions: dict | None = None, dry_run: bool = False) -> tuple[dict, bool]:
        """Delete with Background (default), Foreground or Orphan propagation and finalizers.

        Returns the object's last state and whether it is gone now (False: deletion pending finalizers).
        """
        rt = self.resource(resource)
        ns = self._ns(rt, namespace)
        old = self._current(rt, ns, name)
        ometa = old["metadata"]
        pre = preconditions or {}
        if pre.get("uid") and pre["uid"] != ometa["uid"]:
            raise ApiError(409, "Conflict",
                           f'Operation cannot be fulfilled on {rt.group_resource} "{name}": Precondition failed: '
                           f"UID in precondition: {pre['uid']}, UID in object meta: {ometa['uid']}",
                           {"name": name, "group": rt.group, "kind": rt.plural})
        if pre.get("resourceVersion") and pre["resourceVersion"] != ometa["resourceVersion"]:
            raise ApiError(409, "Conflict",
                           f'Operation cannot be fulfilled on {rt.group_resource} "{name}": the ResourceVersion '
                           f"in the precondition ({pre['resourceVersion']}) does not match the ResourceVersion "
                           f"in record ({ometa['resourceVersion']}). The object might have been modified",
                           {"name": name, "group": rt.group, "kind": rt.plural})
        if rt.key == ("", "v1", "namespaces") and name in PROTECTED_NAMESPACES:
            raise ApiError.forbidden("namespaces", name, "this namespace may not be deleted", "", "namespaces")
        policy = propagation_policy or "Background"
        if policy not in ("Background", "Foreground", "Orphan"):
            raise ApiError.bad_request(f"unsupported propagation policy {policy!r}")
        self._admit("DELETE", rt, ns, name, None, old, None, dry_run)
        if dry_run:
            return self.present(rt, old), False
        finalizers = list(ometa.get("finalizers") or [])
        wanted = {"Orphan": "orphan", "Foreground": "foregroundDeletion"}.get(policy)
        is_namespace = rt.key == ("", "v1", "namespaces")
        if wanted and wanted not in finalizers:
            finalizers.append(wanted)
        if finalizers or is_namespace:
            new = clone(old)
            nmeta = new["metadata"]
            if finalizers:
                nmeta["finalizers"] = finalizers
            if not nmeta.get("deletionTimestamp"):
                nmeta["deletionTimestamp"] = now_rfc3339()
                nmeta["deletionGracePeriodSeconds"] = 0
            if is_namespace:
                new["status"] = {"phase": "Terminating"}
            if _without_times(new) != _without_times(old):
                self._commit(rt, ns, name, new, old, "MODIFIED")
            if is_namespace:
                self._drain_namespace(name)
            self._process_finalizers(rt, ns, name)
            current = self._bucket(rt).get((ns, name))
            if current is None:
                return self.present(rt, new), True
            return self.present(rt, current), False
        gone = self._remove(rt, ns, name, old=old)
        return self.present(rt, gone), True

    def _remove(self, rt: ResourceType, ns, name: str, old: dict) -> dict:
        """Remove for real (DELETED), then collect dependents and finish waiting owners/namespaces."""
        gone = self._commit(rt, ns, name, None, old, "DELETED")
        uid = old["metadata"].get("uid")
        if rt.kind == "CustomResourceDefinition" and rt.group == "apiextensions.k8s.io":
            self._unserve_crd(old)
        for dep in sorted(self._dependents.get(uid, set())):
            self._collect_dependent(dep, uid)
        for ref in old["metadata"].get("ownerReferences") or []:
            owner = self._by_uid.get(ref.get("uid"))
            if owner:
                ort = self._type_of(owner[0])
                if ort:
                    self._process_finalizers(ort, owner[1], owner[2])
        if rt.namespaced and ns:
            nsrt = self.registry.get("", "v1", "namespaces")
            nsobj = self._bucket(nsrt).get((None, ns))
            if nsobj is not None and nsobj["metadata"].get("deletionTimestamp"):
                self._process_finalizers(nsrt, None, ns)
        return gone

    def _type_of(self, gp: tuple[str, str]) -> ResourceType | None:
        for rt in self.registry.all():
            if (rt.group, rt.plural) == gp:
                return rt
        return None

    def _collect_dependent(self, dep, owner_uid: str) -> None:
        """Background GC: delete a dependent whose owners are all gone, else drop the dangling reference."""
        gp, ns, name = dep
        rt = self._type_of(gp)
        obj = self._objects.get(gp, {}).get((ns, name))
        if rt is None or obj is None:
            return
        refs = obj["metadata"].get("ownerReferences") or []
        alive = [r for r in refs if r.get("uid") != owner_uid and r.get("uid") in self._by_uid]
        if alive:
            new = clone(obj)
            new["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != owner_uid]
            self._write(rt, obj, new, GC_MANAGER, None, False)
        elif not obj["metadata"].get("deletionTimestamp"):
            self.delete(rt, ns, name, propagation_policy="Background")

    def _dependents_of(self, uid: str) -> list[tuple[ResourceType, dict]]:
        out = []
        for gp, ns, name in sorted(self._dependents.get(uid, set())):
            rt = self._type_of(gp)
            obj = self._objects.get(gp, {}).get((ns, name))
            if rt is not None and obj is not None:
                out.append((rt, obj))
        return out

    def _process_finalizers(self, rt: ResourceType, ns, name: str) -> None:
        """The garbage collector's and namespace controller's part of a pending deletion."""
        obj = self._bucket(rt).get((ns, name))
        if obj is None or not obj["metadata"].get("deletionTimestamp"):
            return
        meta = obj["metadata"]
        uid = meta["uid"]
        finalizers = list(meta.get("finalizers") or [])
        done = []
        if "orphan" in finalizers:
            for drt, dep in self._dependents_of(uid):
                new = clone(dep)
                new["metadata"]["ownerReferences"] = [r for r in dep["metadata"].get("ownerReferences") or []
                                                      if r.get("uid") != uid]
                if not new["metadata"]["ownerReferences"]:
                    new["metadata"].pop("ownerReferences")
                self._write(drt, dep, new, GC_MANAGER, None, False)
            done.append("orphan")
        if "foregroundDeletion" in finalizers:
            for drt, dep in self._dependents_of(uid):
                dep = self._bucket(drt).get((dep["metadata"].get("namespace"), dep["metadata"]["name"]))
                if dep is not None and not dep["metadata"].get("deletionTimestamp"):
                    self.delete(drt, dep["metadata"].get("namespace"), dep["metadata"]["name"],
                                propagation_policy="Foreground")
            obj = self._bucket(rt).get((ns, name))
            if obj is None:
                return
            blocking = [d for _, d in self._dependents_of(uid)
                        if any(r.get("uid") == uid and r.get("blockOwnerDeletion")
                               for r in d["metadata"].get("ownerReferences") or [])]
            if not blocking:
                done.append("foregroundDeletion")
        obj = self._bucket(rt).get((ns, name))
        if obj is None:
            return
        if rt.key == ("", "v1", "namespaces"):
            if "kubernetes" in ((obj.get("spec") or {}).get("finalizers") or []) and \
                    not self._namespace_has_content(name):
                new = clone(obj)
                new["spec"]["finalizers"] = []
                obj = self._commit(rt, ns, name, new, obj, "MODIFIED")
            if ((obj.get("spec") or {}).get("finalizers") or []):
                return
        remaining = [f for f in obj["metadata"].get("finalizers") or [] if f not in done]
        if remaining:
            if done:
                new = clone(obj)
                new["metadata"]["finalizers"] = remaining
                self._commit(rt, ns, name, new, obj, "MODIFIED")
            return
        final = clone(obj)
        final["metadata"].pop("finalizers", None)
        self._remove(rt, ns, name, old=final)

    def _index_owners(self, obj: dict, gp, ns, name, *, add: bool) -> None:
        """Keep the owner uid -> dependents index (what garbage collection follows) current."""
        for ref in obj["metadata"].get("ownerReferences") or []:
            uid = ref.get("uid")
            if not uid:
                continue
            deps = self._dependents.setdefault(uid, set())
            if add:
                deps.add((gp, ns, name))
            else:
                deps.discard((gp, ns, name))
                if not deps:
                    self._dependents.pop(uid, None)

    def _namespace_has_content(self, namespace: str) -> bool:
        return any(ns == namespace for bucket in self._objects.values() for (ns, _n) in bucket)

    def _drain_namespace(self, namespace: str) -> None:
        for gp, bucket in list(self._objects.items()):
            rt = self._type_of(gp)
            if rt is None or not rt.namespaced:
                continue
            for ns, name in [k for k in bucket if k[0] == namespace]:
                obj = bucket.get((ns, name))
                if obj is not None and not obj["metadata"].get("deletionTimestamp"):
                    self.delete(rt, ns, name, propagation_policy="Background")

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

    def _collect_dangling(self, rt: ResourceType, ns, name: str, uid: str) -> None:
        """The garbage collector deletes an object whose owners are all gone, shortly after it appears."""
        def collect():
            obj = self._bucket(rt).get((ns, name))
            if obj is None or obj["metadata"]["uid"] != uid or obj["metadata"].get("deletionTimestamp"):
                return
            if not any(r.get("uid") in self._by_uid for r in obj["metadata"].get("ownerReferences") or []):
                self.delete(rt, ns, name, propagation_policy="Background")

        try:
            asyncio.get_running_loop().call_soon(collect)  # after the creator has its answer, as the real GC
        except RuntimeError:
            collect()  # no loop: a synchronous caller
