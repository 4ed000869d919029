"""Persistence for the store: snapshots of every object and the resourceVersion, saved and loaded atomically.

A mixin of `kubesim.apiserver.store.Store`; `kubesim serve --state FILE` uses `save` and `load`.
"""

from __future__ import annotations

import json
import os


class PersistenceMixin:
    """`snapshot`/`restore` in memory, `save`/`load` to a JSON file."""

    def snapshot(self) -> dict:
        """Everything needed to restore the store: resourceVersion and all objects (CRDs first)."""
        objects = []
        crd_gp = ("apiextensions.k8s.io", "customresourcedefinitions")
        for gp in sorted(self._objects, key=lambda g: g != crd_gp):
            for obj in self._objects[gp].values():
                objects.append({"group": gp[0], "plural": gp[1], "object": obj})
        return {"resourceVersion": self._rv, "objects": objects}

    def save(self, path: str) -> None:
        """Write a snapshot atomically to `path`."""
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            json.dump(self.snapshot(), f, separators=(",", ":"))
        os.replace(tmp, path)

    def restore(self, snap: dict) -> None:
        """Replace the contents with a snapshot; older resourceVersions become 410 for watchers."""
        self._objects.clear()
        for item in snap.get("objects") or []:
            obj = item["object"]
            gp = (item["group"], item["plural"])
            ns, name = obj["metadata"].get("namespace"), obj["metadata"]["name"]
            self._bucket_of(gp)[(ns, name)] = obj
            if gp == ("apiextensions.k8s.io", "customresourcedefinitions"):
                self._serve_crd(obj)
        self._rv = int(snap.get("resourceVersion") or 0)
        self._history.clear()
        self._compacted = self._rv
        for cb in self.on_change:
            cb(None)  # whatever a listener keeps of the objects is to be built again

    def load(self, path: str) -> bool:
        """Restore from `path` if it exists; returns whether it did."""
        if not os.path.exists(path):
            return False
        with open(path) as f:
            self.restore(json.load(f))
        return True
