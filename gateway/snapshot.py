"""The routing snapshot as the gateway holds it: reloaded when the file changes, looked up in memory."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass, field

log = logging.getLogger("gateway.snapshot")


@dataclass
class Routing:
    keys: dict = field(default_factory=dict)
    services: list = field(default_factory=list)
    tenants: dict = field(default_factory=dict)
    loaded: bool = False

    def key(self, plaintext: str) -> dict | None:
        """The key's entry if it is known and not expired (the snapshot holds only usable keys, but an
        expiry may pass between two snapshots)."""
        entry = self.keys.get(hashlib.sha256(plaintext.encode()).hexdigest())
        if entry is None or entry["expires_at"] <= time.time():
            return None
        return entry

    def service(self, service_id: int) -> dict | None:
        return next((s for s in self.services if s["id"] == service_id), None)

    def models_for(self, key: dict) -> dict[str, dict]:
        """Every name the key may call (service name, served model name, adapter) → its service."""
        allowed = key["services"]
        names: dict[str, dict] = {}
        for service in self.services:
            if service["tenant_id"] != key["tenant_id"] or (allowed is not None and service["id"] not in allowed):
                continue
            for name in (service["name"], service["served_model"], *service["adapters"]):
                names.setdefault(name, service)
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
