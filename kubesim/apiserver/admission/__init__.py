"""The admission chain: what a hook sees before a write is persisted, the hook signature, and the
built-in plugins (`tolerations.py`: ExtendedResourceToleration, mutating; `quota.py`: ResourceQuota,
validating), which the API server runs as kube-apiserver does, before anything is stored."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..resources import ResourceType


@dataclass(slots=True)
class AdmissionRequest:
    """What an admission hook sees before a write is persisted (object is the proposed new state)."""

    operation: str  # CREATE | UPDATE | DELETE
    resource: ResourceType
    namespace: str | None
    name: str
    object: dict | None
    old_object: dict | None
    subresource: str | None
    dry_run: bool
    store: Any  # the kubesim.apiserver.store.Store being written (hooks read other objects through it)


AdmissionHook = Callable[[AdmissionRequest], None]
