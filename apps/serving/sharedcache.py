"""The cluster cache of platform-wide models on a real cluster: one backing volume for every tenant namespace.

A claim is namespaced, so tenants cannot share one. Instead each tenant namespace gets a PersistentVolume of its own
(`<namespace>-<claim>`), all of them on the same backing volume (`settings.PLATFORM_MODEL_CACHE`: an NFS export or
a CSI volume handle), and the namespace's cache claim binds to its volume by name (`volumeName`, no storage class).
Pods mount the claim with `subPath: <claim>`: every tenant's pods of a model read and fill the same directory, so the
weights are downloaded once per cluster. The volumes are `Retain`: deleting a tenant's claim never deletes the
weights the other tenants read. The model agent mounts the same volume (its own claim in the platform namespace) to
copy from.

Pure: settings in, dicts out.
"""

from __future__ import annotations

import re

_NFS = re.compile(r"^nfs://(?P<server>[A-Za-z0-9.\-]+|\[[0-9A-Fa-f:]+\])(?P<path>/[^\s]*)$")
_CSI = re.compile(r"^csi://(?P<driver>[a-z0-9]([a-z0-9.\-]{0,61}[a-z0-9])?)/(?P<handle>\S+)$")


def parse_shared_cache(value: str, name: str) -> str:
    """`nfs://<server>/<path>`, `csi://<driver>/<volume handle>` or "" (off); ValueError naming the setting."""
    value = value.strip()
    if value and not (_NFS.match(value) or _CSI.match(value)):
        raise ValueError(f"{name}={value!r} is neither nfs://<server>/<export path> nor csi://<driver>/<volume "
                         f"handle>")
    return value


def volume_source(value: str) -> dict:
    """The PersistentVolume source of the backing volume: {"nfs": …} or {"csi": …}."""
    nfs = _NFS.match(value)
    if nfs:
        return {"nfs": {"server": nfs["server"], "path": nfs["path"]}}
    csi = _CSI.match(value)
    if csi:
        return {"csi": {"driver": csi["driver"], "volumeHandle": csi["handle"]}}
    raise ValueError(f"{value!r} names no shared cache volume")


def volume_name(namespace: str, claim: str) -> str:
    """The namespace's own PersistentVolume onto the shared backing volume (cluster-scoped, so per namespace)."""
    return f"{namespace}-{claim}"[:253]


def shared_claim(value: str, claim: dict) -> list[dict]:
    """[PersistentVolume, PersistentVolumeClaim]: `claim` (the namespace's cache claim) bound by name to a volume of
    its own on the shared backing volume `value`."""
    meta = claim["metadata"]
    name = volume_name(meta["namespace"], meta["name"])
    volume = {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": dict(meta.get("labels") or {}),
                     "annotations": dict(meta.get("annotations") or {})},
        "spec": {
            "capacity": {"storage": claim["spec"]["resources"]["requests"]["storage"]},
            "accessModes": ["ReadWriteMany"],
            "volumeMode": "Filesystem",
            "persistentVolumeReclaimPolicy": "Retain",  # the weights belong to every tenant, not to this claim
            "storageClassName": "",
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": meta["namespace"],
                         "name": meta["name"]},
            **volume_source(value),
        },
    }
    bound = {**claim, "spec": {**claim["spec"], "storageClassName": "", "volumeName": name}}
    return [volume, bound]


def source_words(value: str, claim: str) -> str:
    """Where a pod's cluster cache lives, for its weights annotation: `nfs://server/path/<claim>` or
    `csi://driver/handle/<claim>`."""
    return f"{value.rstrip('/')}/{claim}"
