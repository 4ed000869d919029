"""The routing snapshot as the gateway holds it: reloaded when the file changes, looked up in memory."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass, field

from gateway.names import names_of

log = logging.getLogger("gateway.snapshot")


@dataclass
class Routing:
    keys: dict = field(default_factory=dict)
    services: list = field(default_factory=list)
    tenants: dict = field(default_factory=dict)
    loaded: bool = False

    def __post_init__(self):
        # Indexes built once per snapshot, so a request's lookups do not walk every service.
        self._by_id = {s["id"]: s for s in self.services}
        self._by_tenant: dict = {}
        for service in self.services:
            self._by_tenant.setdefault(service["tenant_id"], []).append(service)
        self._names: dict = {}  # (tenant, allowed services or None) → models_for's answer

    def key(self, plaintext: str) -> dict | None:
        """The key's entry if it is known and not expired (the snapshot holds only usable keys, but an
        expiry may pass between two snapshots)."""
        entry = self.keys.get(hashlib.sha256(plaintext.encode()).hexdigest())
        if entry is None or entry["expires_at"] <= time.time():
            return None
        return entry

    def service(self, service_id: int) -> dict | None:
        return self._by_id.get(service_id)

    def models_for(self, key: dict) -> dict[str, tuple[dict, ...]]:
        """Every name the key may call (service name, served model name, adapter) → the services that answer
        to it (gateway/names.py: one for a service's name; a model's or adapter's may have several). Keys of
        one tenant allowed the same services share one answer, kept for the snapshot's life."""
        allowed = key["services"]
        scope = (key["tenant_id"], None if allowed is None else tuple(allowed))  # the snapshot lists them sorted
        names = self._names.get(scope)
        if names is None:
            names = self._names[scope] = names_of(
                s for s in self._by_tenant.get(key["tenant_id"], ()) if allowed is None or s["id"] in allowed)
        return names


class SnapshotFile:
    """Re-reads `path` when its modification time changes; a broken file keeps the last good snapshot."""

    def __init__(self, path: str):
        self.path = path
        self.routing = Routing()
        self._mtime: float | None = None

    def refresh(self) -> None:
        try:
            mtime = os.stat(self.path).st_mtime_ns
            if mtime == self._mtime:
                return
            with open(self.path) as handle:
                data = json.load(handle)
            self.routing = Routing(keys=data["keys"], services=data["services"], tenants=data["tenants"],
                                   loaded=True)
            self._mtime = mtime
        except (OSError, ValueError, KeyError) as exc:
            log.warning("snapshot %s not loaded: %s", self.path, exc)
