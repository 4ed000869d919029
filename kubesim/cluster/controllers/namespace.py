"""The namespace controller, as kube-controller-manager runs it: it empties a deleted namespace.

Deleting a namespace only marks it (`deletionTimestamp`, phase Terminating; the API server refuses new
content in it with 403). This controller deletes everything in it, resource by resource as discovery
lists them, waits until nothing is left (objects held by finalizers keep it waiting), then removes the
`kubernetes` finalizer through `namespaces/{name}/finalize` and deletes the namespace again, which the
API server now removes. Its calls are authorized as `system:serviceaccount:kube-system:namespace-controller`.
"""

from __future__ import annotations

from kubesim.apiserver.errors import ApiError
from kubesim.cluster.controllers.base import Controller, Informer

NAMESPACES = "v1/namespaces"
FINALIZER = "kubernetes"


class NamespaceController(Controller):
    name = "namespace-controller"
    retry_seconds = 0.5
    recheck_seconds = 0.2  # how soon a namespace whose content is still going away is looked at again

    def __init__(self, api, namespaces: Informer):
        super().__init__()
        self.api = api
        self.namespaces = namespaces
        namespaces.handlers.append(self._changed)

    def _changed(self, event_type: str, obj: dict, _old: dict | None) -> None:
        if event_type != "DELETED" and obj["metadata"].get("deletionTimestamp"):
            self.enqueue(obj["metadata"]["name"])

    async def reconcile(self, name: str) -> None:
        namespace = await self.api.get(NAMESPACES, None, name)
        if namespace is None or not namespace["metadata"].get("deletionTimestamp"):
            return
        finalizers = (namespace.get("spec") or {}).get("finalizers") or []
        if FINALIZER in finalizers:
            if await self._delete_content(name):
                self.enqueue_after(name, self.recheck_seconds)
                return
            namespace = await self.api.finalize_namespace(name, [f for f in finalizers if f != FINALIZER])
        if (namespace.get("spec") or {}).get("finalizers"):
            return  # another finalizer's owner finishes it
        try:
            await self.api.delete(NAMESPACES, None, name, preconditions={"uid": namespace["metadata"]["uid"]})
        except ApiError as error:
            if error.code not in (404, 409):
                raise

    async def _delete_content(self, namespace: str) -> int:
        """Delete what is in `namespace`; returns how many objects are still going (held by finalizers)."""
        left = 0
        for rt in self.api.resource_types(namespaced=True):
            for obj in await self.api.list(rt, namespace):
                if not obj["metadata"].get("deletionTimestamp"):
                    try:
                        obj = await self.api.delete(rt, namespace, obj["metadata"]["name"],
                                                    preconditions={"uid": obj["metadata"]["uid"]})
                    except ApiError as error:
                        if error.code not in (404, 409):
                            raise
                        continue
                left += bool(obj["metadata"].get("deletionTimestamp"))  # removed now, or still held
        return left
