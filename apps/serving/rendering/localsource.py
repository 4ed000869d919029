"""`local://path` sources: directories of the node's local models folder, mounted read-only into the engine.

A model or adapter whose source is `local://path` is not downloaded: the engine reads `/models/local/path`, and the
pod mounts the node's folder (`NODE_DIR`, a hostPath volume) there. On kubesim's cpu-real nodes the kubelet reads
that mount as its `--models-dir` (kubesim/engines/mountmap.py), in the command line and in vLLM's adapter load
requests, so a local adapter is loaded at run time by its path in the pod. Only vLLM services take such sources
(apps/serving/validation.py).
"""

from __future__ import annotations

from apps.catalog.validators import LOCAL_PREFIX, is_local

__all__ = ["LOCAL_MOUNT", "LOCAL_VOLUME", "NODE_DIR", "is_local", "local_path", "local_volume"]

LOCAL_MOUNT = "/models/local"
LOCAL_VOLUME = "local-models"
NODE_DIR = "/var/lib/llm-models"  # the node's folder; kubesim's cpu-real kubelet reads its --models-dir instead


def local_path(uri: str) -> str:
    """Where the engine reads a `local://path` source in the pod."""
    return f"{LOCAL_MOUNT}/{uri.removeprefix(LOCAL_PREFIX)}"


def local_volume() -> tuple[dict, dict]:
    """The pod volume of the node's folder and the engine container's read-only mount of it."""
    return ({"name": LOCAL_VOLUME, "hostPath": {"path": NODE_DIR, "type": "Directory"}},
            {"name": LOCAL_VOLUME, "mountPath": LOCAL_MOUNT, "readOnly": True})
