"""Engine pods hold no Kubernetes credential: only pods that name a ServiceAccount (the routers' discovery and
the endpoint picker read the API) get a token mounted."""

from __future__ import annotations

import pytest

from apps.serving.rendering import render_service
from tests.serving.golden.specs import SPECS


def _pod_specs(obj: dict) -> list[dict]:
    spec = obj.get("spec", {})
    if obj["kind"] == "LeaderWorkerSet":
        lwt = spec["leaderWorkerTemplate"]
        return [lwt["leaderTemplate"]["spec"], lwt["workerTemplate"]["spec"]]
    return [spec["template"]["spec"]] if "template" in spec else []


@pytest.mark.parametrize("name", sorted(SPECS))
def test_no_engine_pod_mounts_a_service_account_token(name):
    pods = [(obj, pod) for obj in render_service(SPECS[name]()) for pod in _pod_specs(obj)]
    engines = [pod for obj, pod in pods if obj["metadata"]["labels"].get("app.kubernetes.io/component")
               not in ("router", "epp")]

    assert engines
    assert all(pod["automountServiceAccountToken"] is False for pod in engines)
    for _, pod in pods:
        # A token only where the pod says whose it is (and that ServiceAccount has its minimal Role).
        assert pod["automountServiceAccountToken"] is ("serviceAccountName" in pod)
