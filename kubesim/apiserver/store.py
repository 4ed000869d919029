"""The object store behind kubesim's API server, usable in-process by controllers on the same loop.

Every HTTP verb is a thin call into `Store`, so in-process callers (the scheduler, controllers and
kubelet of the simulated cluster) get exactly the semantics clients see over HTTP: one global
resourceVersion bumped on real changes only, generation, status isolation, the scale subresource,
the four patch types, server-side apply with managedFields, finalizers, deletion propagation
(recorded as finalizers; the garbage collector and namespace controller are controllers in kubesim/cluster),
admission hooks, and watches with replay.

Public in-process API (stable; all methods are synchronous and must be called from the event loop
thread that runs the server, which makes each call atomic):

    store.resource("apps", "v1", "deployments")          -> ResourceType (also accepts "apps/v1/deployments")
    store.get(res, namespace, name, subresource=None)    -> dict (a private copy; "scale" gives a Scale)
    store.list(res, namespace=None, label_selector=None, field_selector=None) -> (items, resourceVersion)
    store.create(res, namespace, obj, field_manager=None, dry_run=False)      -> dict
    store.update(res, namespace, name, obj, subresource=None, field_manager=None, dry_run=False) -> dict
    store.update_status(res, namespace, name, obj, field_manager=None)        -> dict
    store.patch(res, namespace, name, patch, patch_type, field_manager=None, force=False,
                subresource=None, dry_run=False)  # patch_type: "merge" | "json" | "strategic" | "apply"
    store.delete(res, namespace, name, propagation_policy=None, preconditions=None, dry_run=False)
                                                         -> (last state of the object, removed_now: bool)
    store.finalize_namespace(name, finalizers)           -> dict (the namespace's /finalize subresource)
    store.watch(res, namespace=None, label_selector=None, field_selector=None, resource_version=None)
        -> Subscription: `async for ev in sub:` yields WatchEvent(type, object); `sub.close()` to stop.
           resource_version None/"0" starts with synthetic ADDED events for current objects; "N" replays
           every change after N (ApiError 410 if that history is gone).
    store.add_admission_hook(fn)   # fn(AdmissionRequest) -> None, raises ApiError to reject
    store.resource_version         # current global resourceVersion (int)
    store.exists(res, namespace, name); store.crd_of(res); store.save(path); store.load(path)
    with store.raw_results(): ...  # calls return stored objects uncopied (serializers only; never mutate)

`res` is a ResourceType, a `(group, version, plural)` tuple or `"group/version/plural"` (`"v1/pods"` for
the core group). Errors are `kubesim.apiserver.errors.ApiError` with the apiserver's code, reason and message.
Objects handed out are copies: mutate them freely and write them back with update/patch.

Layout: this module holds objects, history, create and update; mixins add the other verbs:
`deletion` (the delete verb, finalizers, namespace finalize), `apply` (patch, server-side apply), `scale` (the scale
subresource), `persistence` (snapshots). `watch` has the subscriptions, `objects` shared helpers.
"""

from __future__ import annotations

import contextlib
import copy
import json
import random
import uuid
from collections import deque
from collections.abc import Callable

from .admission import AdmissionHook, AdmissionRequest
from .apply import PATCH_TYPES, PatchMixin
from .deletion import NAMESPACES, DeletionMixin
from .errors import ApiError
from .fieldmanager import FieldManager
from .index import INDEXED_FIELDS, IndexedBucket
from .objects import (
    _spec_of,
    _status_scope,
    _without_times,
    apply_spec_defaults,
    clone,
    now_rfc3339,
)
from .persistence import PersistenceMixin
from .resources import Registry, ResourceType, preinstalled_crds, types_from_crd
from .scale import ScaleMixin
from .selectors import field_equalities, label_equalities, parse_field_selector, parse_label_selector
from .validation import validate
from .watch import Subscription, WatchEvent, _Event

__all__ = ["PATCH_TYPES", "AdmissionHook", "AdmissionRequest", "Store", "Subscription", "WatchEvent"]

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_GENERATE_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_SERVER_KEPT = ("uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds")


class Store(DeletionMixin, PatchMixin, ScaleMixin, PersistenceMixin):
    """All objects, the global resourceVersion, watch history and subscriptions (see module docstring)."""

    def __init__(self, *, seed: int | None = None, history_size: int = 10000, seed_objects: bool = True):
        self.registry = Registry()
        self._rand = random.Random(seed)
        self._objects: dict[tuple[str, str], dict[tuple[str | None, str], dict]] = {}
        self._rv = 0
        self._history: deque[_Event] = deque(maxlen=history_size)
        self._compacted = 0  # the newest resourceVersion no longer in history
        self._subs: set[Subscription] = set()
        self._hooks: list[AdmissionHook] = []
        self._cluster_ip = 0
        # called after every commit with its event, and with None when a snapshot replaced everything
        self.on_change: list[Callable[[_Event | None], None]] = []
        self._raw = False
        if seed_objects:
            for ns in DEFAULT_NAMESPACES:
                self.create("v1/namespaces", None, {"metadata": {"name": ns}}, field_manager="kube-apiserver")
            for crd in preinstalled_crds():
                self.create("apiextensions.k8s.io/v1/customresourcedefinitions", None, crd,
                            field_manager="kube-apiserver")

    # ------------------------------------------------------------------ lookups

    @property
    def resource_version(self) -> int:
        return self._rv

    def resource(self, group_or_res, version: str | None = None, plural: str | None = None) -> ResourceType:
        """Resolve a resource; raises ApiError 404 when it is not served."""
        res = (group_or_res, version, plural) if version is not None else group_or_res
        try:
            return self.registry.resolve(res)
        except KeyError:
            raise ApiError.path_not_found() from None

    def add_admission_hook(self, hook: AdmissionHook) -> None:
        """Register `hook(AdmissionRequest)`; it runs before every create/update/delete and may raise ApiError."""
        self._hooks.append(hook)

    def _bucket(self, rt: ResourceType) -> IndexedBucket:
        return self._bucket_of((rt.group, rt.plural))

    def _bucket_of(self, gp: tuple[str, str]) -> IndexedBucket:
        if gp not in self._objects:
            self._objects[gp] = IndexedBucket(INDEXED_FIELDS.get(gp, ()))
        return self._objects[gp]

    def _ns(self, rt: ResourceType, namespace: str | None) -> str | None:
        return (namespace or "default") if rt.namespaced else None

    def present(self, rt: ResourceType, obj: dict) -> dict:
        """A stored object as callers receive it: a copy with `apiVersion` (uncopied under raw_results)."""
        if self._raw:
            # the HTTP layer serializes the stored object directly and never mutates it
            return obj if obj.get("apiVersion") == rt.api_version else {**obj, "apiVersion": rt.api_version}
        out = clone(obj)
        out["apiVersion"] = rt.api_version
        return out

    @contextlib.contextmanager
    def raw_results(self):
        """Within this block calls return stored objects uncopied (for serializers; never mutate them)."""
        self._raw = True
        try:
            yield self
        finally:
            self._raw = False

    def crd_of(self, rt: ResourceType) -> dict | None:
        """The CustomResourceDefinition object that defines a custom resource type (stored, read-only)."""
        return self._objects.get(("apiextensions.k8s.io", "customresourcedefinitions"), {}).get(
            (None, f"{rt.plural}.{rt.group}"))

    def exists(self, resource, namespace: str | None, name: str) -> bool:
        rt = self.resource(resource)
        return (self._ns(rt, namespace), name) in self._bucket(rt)

    def _current(self, rt: ResourceType, namespace: str | None, name: str) -> dict:
        obj = self._bucket(rt).get((self._ns(rt, namespace), name))
        if obj is None:
            raise ApiError.not_found(rt.group_resource, name, rt.group, rt.plural)
        return obj

    def get(self, resource, namespace: str | None, name: str, subresource: str | None = None) -> dict:
        """The object (a copy), or its Scale for subresource="scale"; 404 when absent."""
        rt = self.resource(resource)
        obj = self._current(rt, namespace, name)
        if subresource == "scale":
            return self._scale_of(rt, obj)
        return self.present(rt, obj)

    def list(self, resource, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None) -> tuple[list[dict], str]:
        """Matching objects (copies, sorted by namespace/name) and the list's resourceVersion."""
        rt = self.resource(resource)
        labels = parse_label_selector(label_selector)
        fields = parse_field_selector(field_selector)
        bucket = self._bucket(rt)
        scope = namespace if namespace and rt.namespaced else None
        matched = []
        for key in bucket.candidates(scope, label_equalities(label_selector), field_equalities(field_selector)):
            obj = bucket[key]
            if scope is not None and key[0] != scope:
                continue
            if labels and not labels(obj):
                continue
            if fields and not fields(obj):
                continue
            matched.append((key, obj))
        # Sort only what matched: a selective list in a large store stays cheap.
        matched.sort(key=lambda kv: (kv[0][0] or "", kv[0][1]))
        return [self.present(rt, obj) for _key, obj in matched], str(self._rv)

    # ------------------------------------------------------------------ watch

    def watch(self, resource, namespace: str | None = None, label_selector: str | None = None,
              field_selector: str | None = None, resource_version: str | None = None,
              send_initial_events: bool | None = None) -> Subscription:
        """Subscribe to changes; see the module docstring for the resourceVersion rules."""
        rt = self.resource(resource)
        sub = Subscription(self, rt, namespace if rt.namespaced else None, label_selector, field_selector)
        for t, ev in self.initial_events(sub, resource_version, send_initial_events):
            sub.queue.put_nowait((t, ev))
        self._subs.add(sub)
        return sub

    def initial_events(self, sub: Subscription, resource_version: str | None,
                       send_initial_events: bool | None = None) -> list[tuple[str, _Event]]:
        """Events a new watch starts with: synthetic ADDED for a fresh start, else the replayed history."""
        fresh = resource_version in (None, "", "0")
        if send_initial_events or (fresh and send_initial_events is None):
            out = []
            for (ns, _name), obj in sorted(self._bucket(sub.rt).items(),
                                           key=lambda kv: (kv[0][0] or "", kv[0][1])):
                if sub.matches(obj):
                    out.append(("ADDED", _Event(self._rv, sub.gp, ns, "ADDED", obj, None)))
            return out
        if fresh:
            return []
        try:
            since = int(resource_version)
        except ValueError:
            raise ApiError.bad_request(f"invalid resource version: {resource_version}") from None
        if since < self._compacted:
            raise ApiError.expired(since, self._compacted + 1)
        out = []
        for ev in self._history:
            if ev.rv > since and ev.gp == sub.gp:
                t = sub.translate(ev)
                if t is not None:
                    out.append((t, ev))
        return out

    def subscribe_raw(self, sub: Subscription) -> None:
        """Fan events out to `sub` from now on (the HTTP layer queues initial events itself)."""
        self._subs.add(sub)

    def unsubscribe(self, sub: Subscription) -> None:
        """Stop fanning events out to `sub` (what `Subscription.close` calls)."""
        self._subs.discard(sub)

    # ------------------------------------------------------------------ commit

    def _commit(self, rt: ResourceType, ns: str | None, name: str, obj: dict | None, old: dict | None,
                type_: str) -> dict:
        self._rv += 1
        bucket = self._bucket(rt)
        gp = (rt.group, rt.plural)
        if type_ == "DELETED":
            obj = copy.copy(old)
            obj["metadata"] = dict(old["metadata"], resourceVersion=str(self._rv))
            bucket.pop((ns, name), None)
        else:
            obj["metadata"]["resourceVersion"] = str(self._rv)
            bucket[(ns, name)] = obj
        if len(self._history) == self._history.maxlen:
            self._compacted = self._history[0].rv
        ev = _Event(self._rv, gp, ns, type_, obj, old)
        self._history.append(ev)
        for sub in list(self._subs):
            sub.offer(ev)
        for cb in self.on_change:
            cb(ev)
        return obj

    def _admit(self, operation: str, rt: ResourceType, ns, name, obj, old, subresource, dry_run) -> None:
        if not self._hooks:
            return
        req = AdmissionRequest(operation, rt, ns, name, obj, old, subresource, dry_run, self)
        raw, self._raw = self._raw, False  # hooks get copies from their own store calls
        try:
            for hook in self._hooks:
                hook(req)
        finally:
            self._raw = raw

    # ------------------------------------------------------------------ create

    def create(self, resource, namespace: str | None, obj: dict, *, field_manager: str | None = None,
               dry_run: bool = False) -> dict:
        """Create `obj` (201 semantics): 409 AlreadyExists, 422 Invalid, generateName, defaults."""
        rt = self.resource(resource)
        obj = clone(obj)
        return self._create(rt, namespace, obj, field_manager or "kubesim", dry_run, managed=None)

    def _create(self, rt: ResourceType, namespace, obj: dict, manager: str, dry_run: bool,
                managed: list | None) -> dict:
        if not isinstance(obj, dict):
            raise ApiError.bad_request("the body of the request must be a JSON object")
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            meta = obj["metadata"] = {}
        ns = self._ns(rt, namespace or meta.get("namespace"))
        if rt.namespaced:
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + "".join(self._rand.choice(_GENERATE_CHARS)
                                                              for _ in range(5))
            else:
                raise ApiError.invalid(rt.kind, rt.group_kind, "", rt.group, [{
                    "reason": "FieldValueRequired", "field": "metadata.name",
                    "message": "Required value: name or generateName is required"}])
        name = meta["name"]
        if (ns, name) in self._bucket(rt):
            raise ApiError.already_exists(rt.group_resource, name, rt.group, rt.plural)
        if rt.namespaced:
            nsobj = self._bucket(self.registry.get("", "v1", "namespaces")).get((None, ns))
            if nsobj is not None and nsobj["metadata"].get("deletionTimestamp"):
                raise ApiError.forbidden(rt.group_resource, name,
                                         f"unable to create new content in namespace {ns} because it is "
                                         "being terminated", rt.group, rt.plural)
        for k in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
            meta.pop(k, None)
        self._defaults(rt, obj)
        validate(rt, obj)
        meta["uid"] = str(uuid.UUID(int=self._rand.getrandbits(128), version=4))
        meta["creationTimestamp"] = now_rfc3339()
        meta["generation"] = 1
        fm = FieldManager(rt.api_version, meta["creationTimestamp"])
        if managed is None:
            managed = fm.update({}, obj, None, manager, status=False if rt.status else None)
        if managed:
            meta["managedFields"] = managed
        self._admit("CREATE", rt, ns, name, obj, None, None, dry_run)
        if dry_run:
            return self.present(rt, obj)
        committed = self._commit(rt, ns, name, obj, None, "ADDED")
        if rt.kind == "CustomResourceDefinition" and rt.group == "apiextensions.k8s.io":
            self._serve_crd(committed)
        return self.present(rt, committed)

    def _defaults(self, rt: ResourceType, obj: dict) -> None:
        """The few apiserver defaults clients rely on; status of kinds with /status starts empty."""
        if rt.status:
            obj.pop("status", None)
        apply_spec_defaults(rt, obj)
        if rt.key == ("", "v1", "namespaces"):
            obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
            obj["status"] = {"phase": "Active"}
        elif rt.key == ("", "v1", "pods"):
            obj["status"] = {"phase": "Pending"}
        elif rt.key == ("", "v1", "services"):
            spec = obj.setdefault("spec", {})
            spec.setdefault("type", "ClusterIP")
            if spec["type"] != "ExternalName" and not spec.get("clusterIP"):
                self._cluster_ip += 1
                spec["clusterIP"] = f"10.96.{self._cluster_ip // 250}.{self._cluster_ip % 250 + 1}"
            if spec.get("clusterIP") and spec["clusterIP"] != "None":
                spec.setdefault("clusterIPs", [spec["clusterIP"]])
            for port in spec.get("ports") or []:
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")
                    port.setdefault("targetPort", port.get("port"))
            obj["status"] = {"loadBalancer": {}}
        elif rt.kind == "CustomResourceDefinition" and rt.group == "apiextensions.k8s.io":
            names = (obj.get("spec") or {}).get("names") or {}
            obj["status"] = {
                "acceptedNames": names,
                "storedVersions": [v.get("name") for v in (obj.get("spec") or {}).get("versions") or []
                                   if v.get("storage")],
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                     "message": "no conflicts found", "lastTransitionTime": now_rfc3339()},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                     "message": "the initial names have been accepted", "lastTransitionTime": now_rfc3339()},
                ],
            }

    def _serve_crd(self, crd: dict) -> None:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        for rt in self.registry.all():
            if rt.custom and rt.group == spec.get("group") and rt.plural == names.get("plural"):
                self.registry.remove(rt.key)
        for rt in types_from_crd(crd):
            self.registry.add(rt)

    # ------------------------------------------------------------------ update / patch

    def update(self, resource, namespace: str | None, name: str, obj: dict, *, subresource: str | None = None,
               field_manager: str | None = None, dry_run: bool = False) -> dict:
        """Replace (PUT) the object, its status (subresource="status") or its Scale (subresource="scale")."""
        rt = self.resource(resource)
        old = self._current(rt, namespace, name)
        body = clone(obj)
        if not isinstance(body, dict):
            raise ApiError.bad_request("the body of the request must be a JSON object")
        meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
        if meta.get("name") and meta["name"] != name:
            raise ApiError.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({name})")
        rv = meta.get("resourceVersion")
        if rv:
            if rv != old["metadata"]["resourceVersion"]:
                raise ApiError.conflict(rt.group_resource, name, rt.group, rt.plural)
        elif rt.custom and subresource != "scale":
            raise ApiError.invalid(rt.kind, rt.group_kind, name, rt.group, [{
                "reason": "FieldValueInvalid", "field": "metadata.resourceVersion",
                "message": "Invalid value: 0x0: must be specified for an update"}])
        manager = field_manager or "kubesim"
        if subresource == "scale":
            return self._write_scale(rt, old, body, manager, dry_run)
        new = self._prepare(rt, old, body, subresource)
        written = self._write(rt, old, new, manager, subresource, dry_run)
        return self.present(rt, written)

    def update_status(self, resource, namespace: str | None, name: str, obj: dict, *,
                      field_manager: str | None = None, dry_run: bool = False) -> dict:
        """PUT /status: only `.status` of `obj` is taken."""
        return self.update(resource, namespace, name, obj, subresource="status", field_manager=field_manager,
                           dry_run=dry_run)

    def _prepare(self, rt: ResourceType, old: dict, body: dict, subresource: str | None) -> dict:
        """The object a write proposes: status isolation plus server-owned metadata kept from `old`."""
        if subresource == "status":
            new = clone(old)
            if body.get("status") is None:
                new.pop("status", None)
            else:
                new["status"] = body["status"]
            return new
        new = body
        new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]
        if rt.status:
            if "status" in old:
                new["status"] = clone(old["status"])
            else:
                new.pop("status", None)
        meta = new.get("metadata") if isinstance(new.get("metadata"), dict) else {}
        new["metadata"] = meta
        ometa = old["metadata"]
        for k in ("name", "namespace", *_SERVER_KEPT, "resourceVersion", "managedFields"):
            if k in ometa:
                meta[k] = ometa[k]
            else:
                meta.pop(k, None)
        return new

    def _write(self, rt: ResourceType, old: dict, new: dict, manager: str, subresource: str | None,
               dry_run: bool, managed: list | None = None) -> dict:
        """Validate, account ownership, bump generation, run admission and commit unless a no-op."""
        meta, ometa = new["metadata"], old["metadata"]
        name, ns = ometa["name"], ometa.get("namespace")
        if ometa.get("deletionTimestamp"):
            added = [f for f in meta.get("finalizers") or [] if f not in (ometa.get("finalizers") or [])]
            if added:
                raise ApiError.invalid(rt.kind, rt.group_kind, name, rt.group, [{
                    "reason": "FieldValueForbidden", "field": "metadata.finalizers",
                    "message": "Forbidden: no new finalizers can be added if the object is being deleted, "
                               f"found new finalizers {json.dumps(added)}"}])
        if subresource != "status":
            apply_spec_defaults(rt, new)
            validate(rt, new)
        if _spec_of(new, rt.status) != _spec_of(old, rt.status):
            meta["generation"] = ometa.get("generation", 1) + 1
        status_scope = _status_scope(rt, subresource)
        if managed is None:
            fm = FieldManager(rt.api_version, now_rfc3339())
            managed = fm.update(old, new, ometa.get("managedFields"), manager, subresource=subresource or "",
                                status=status_scope)
        if managed:
            meta["managedFields"] = managed
        else:
            meta.pop("managedFields", None)
        self._admit("UPDATE", rt, ns, name, new, old, subresource, dry_run)
        if _without_times(new) == _without_times(old):
            return old
        if dry_run:
            return new
        if ometa.get("deletionTimestamp") and not meta.get("finalizers") and \
                not (rt.key == NAMESPACES and (new.get("spec") or {}).get("finalizers")):
            self._remove(rt, ns, name, old=new)
            return new
        written = self._commit(rt, ns, name, new, old, "MODIFIED")
        if rt.kind == "CustomResourceDefinition" and rt.group == "apiextensions.k8s.io":
            self._serve_crd(written)
        return written
