"""Rendering the kustomize overlays with the kubectl on PATH (kustomize is built into kubectl)."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
OVERLAYS = ("dev", "production")


@functools.cache
def render(overlay: str) -> tuple[dict, ...]:
    out = subprocess.run(["kubectl", "kustomize", str(DEPLOY / "overlays" / overlay)], capture_output=True,
                         text=True, timeout=60, check=True)
    return tuple(obj for obj in yaml.safe_load_all(out.stdout) if obj)


def find(objects, kind: str, name: str) -> dict:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind} {name}: {len(matches)} found"
    return matches[0]


def pod_specs(objects) -> dict[str, dict]:
    """Every workload's pod spec, by `Kind/name`."""
    return {f"{o['kind']}/{o['metadata']['name']}": o["spec"]["template"]["spec"]
            for o in objects if o["kind"] in ("Deployment", "Job")}


def containers(spec: dict) -> list[dict]:
    return [*(spec.get("initContainers") or []), *spec["containers"]]
