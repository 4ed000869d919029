"""The drift diff shows only real differences, also when the rendered object shares Python objects."""

from __future__ import annotations

from workers.kube import ObjectRef, drift_diff

REF = ObjectRef("apps/v1", "Deployment", "tenant-alpha", "chat")


def _deployment(replicas: int) -> dict:
    # Rendering reuses one dict in two places; a plain yaml dump would write it as &id001 / *id001.
    capabilities = {"drop": ["ALL"]}
    containers = [{"name": "engine", "securityContext": {"capabilities": capabilities}},
                  {"name": "sidecar", "securityContext": {"capabilities": capabilities}}]
    return {"spec": {"replicas": replicas, "template": {"spec": {"containers": containers}}}}


def test_a_replicas_change_with_shared_objects_diffs_only_the_replicas():
    diff = drift_diff(REF, _deployment(2), _deployment(1))
    changed = [line for line in diff.splitlines()
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert changed == ["-  replicas: 1", "+  replicas: 2"]
    assert "&id" not in diff and "*id" not in diff


def test_identical_objects_with_shared_parts_have_no_diff():
    assert drift_diff(REF, _deployment(3), _deployment(3)) == ""
