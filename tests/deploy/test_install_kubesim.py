"""The dev overlay installs on kubesim exactly as docs/install.md says (`kubectl apply --server-side -k`): every
Deployment becomes Ready and the migrate Job completes (kubesim runs the image as a generic container)."""

from __future__ import annotations

import subprocess

import pytest
from kubernetes import client

from tests.deploy.manifests import DEPLOY, render
from tests.polling import wait_for
from tests.workers.conftest import kubesim_url  # noqa: F401 (a fixture: a kubesim process)

pytestmark = pytest.mark.integration


def test_dev_overlay_applies_server_side_and_every_deployment_becomes_ready(kubesim_url):  # noqa: F811
    out = subprocess.run(["kubectl", "--server", kubesim_url, "apply", "--server-side", "-k",
                          str(DEPLOY / "overlays" / "dev")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    expected = {o["metadata"]["name"]: o["spec"]["replicas"] for o in render("dev") if o["kind"] == "Deployment"}
    assert expected == {"controlplane-web": 1, "controlplane-worker": 1, "controlplane-beat": 1,
                        "controlplane-gateway": 1}
    configuration = client.Configuration()
    configuration.host = kubesim_url
    with client.ApiClient(configuration) as api:
        apps, batch = client.AppsV1Api(api), client.BatchV1Api(api)

        def ready() -> dict[str, int]:
            items = apps.list_namespaced_deployment("controlplane").items
            counts = {d.metadata.name: d.status.ready_replicas or 0 for d in items}
            return counts if counts == expected else {}

        wait_for(ready, timeout=90, interval=0.3, message="every Deployment Ready")

        def complete() -> bool:
            job = batch.read_namespaced_job_status("controlplane-migrate", "controlplane")
            return any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or [])

        wait_for(complete, timeout=90, interval=0.3, message="the migrate Job complete")
    # Applying again changes nothing and is accepted (what an upgrade does with the same manifests).
    again = subprocess.run(["kubectl", "--server", kubesim_url, "apply", "--server-side", "-k",
                            str(DEPLOY / "overlays" / "dev")], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
