"""Telling drift from no change, and showing it: what we own compared with what the cluster holds.

Reads no Django models; `workers.kube.Kube.sync` uses these on every object it converges."""

from __future__ import annotations

import difflib

import yaml


def is_subset(desired, live) -> bool:
    """True when every field of `desired` has the same value in `live` (server defaults may add more).

    This is how drift is told from no change without writing: what we own must match exactly, what the
    API server or other managers add is ignored.
    """
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return False
        return all(k in live and is_subset(v, live[k]) for k, v in desired.items())
    if isinstance(desired, list):
        if not isinstance(live, list) or len(desired) != len(live):
            return False
        return all(is_subset(d, lv) for d, lv in zip(desired, live, strict=True))
    scalars = (int, float, str)
    if isinstance(desired, scalars) and isinstance(live, scalars) and type(desired) is not type(live):
        # Quantities and int-or-string fields may come back in the other spelling ("1" vs 1).
        return str(desired) == str(live)
    return desired == live


def project(live, desired):
    """`live` cut down to the shape of `desired`: only what we own, for a readable diff."""
    if isinstance(desired, dict) and isinstance(live, dict):
        return {k: project(live[k], v) for k, v in desired.items() if k in live}
    if isinstance(desired, list) and isinstance(live, list):
        return [project(lv, d) for d, lv in zip(desired, live, strict=False)] + live[len(desired):]
    return live


class _PlainDumper(yaml.SafeDumper):
    """Rendered objects share Python dicts (one capabilities dict in two containers); anchors and
    aliases (`&id001`/`*id001`) would then show up as diff lines that are not changes."""

    def ignore_aliases(self, data):
        return True


def _dump(obj) -> list[str]:
    return yaml.dump(obj, Dumper=_PlainDumper, sort_keys=True).splitlines()


def drift_diff(ref: object, desired: dict, live: dict) -> str:
    """A unified diff from what the cluster has to what we want, over the fields we own (`ref` names the
    object in the headers: an ObjectRef)."""
    have = _dump(project(live, desired))
    want = _dump(desired)
    return "\n".join(difflib.unified_diff(have, want, f"cluster: {ref}", f"desired: {ref}", lineterm="", n=2))
