"""Server-side printing: kubectl get shows the columns a real cluster shows, in lists and in watches."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

from tests.kubesim.conftest import deployment

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def test_kubectl_get_prints_deployment_and_pod_columns(kubectl, apps, core, namespace):
    apps.create_namespaced_deployment(namespace, deployment("web", replicas=3))
    apps.patch_namespaced_deployment_status("web", namespace, {"status": {"readyReplicas": 2, "updatedReplicas": 3,
                                                                          "availableReplicas": 2}})
    lines = kubectl("-n", namespace, "get", "deploy").stdout.splitlines()
    assert lines[0].split() == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert lines[1].split()[:4] == ["web", "2/3", "3", "2"]
    core.create_namespaced_pod(namespace, {"metadata": {"name": "p"},
                                           "spec": {"containers": [{"name": "a", "image": "x"}]}})
    core.patch_namespaced_pod_status("p", namespace, {"status": {"phase": "Pending", "containerStatuses": [
        {"name": "a", "image": "x", "imageID": "", "ready": False, "restartCount": 2,
         "state": {"waiting": {"reason": "ContainerCreating"}}}]}})
    lines = kubectl("-n", namespace, "get", "pods").stdout.splitlines()
    assert lines[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert lines[1].split()[:4] == ["p", "0/1", "ContainerCreating", "2"]


def test_table_rows_carry_partial_object_metadata(kubesim, core, namespace):
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}})
    req = urllib.request.Request(f"{kubesim.url}/api/v1/namespaces/{namespace}/configmaps", headers={"Accept": TABLE})
    with urllib.request.urlopen(req) as resp:
        assert resp.headers["Content-Type"] == "application/json;as=Table;v=v1;g=meta.k8s.io"
        body = json.loads(resp.read())
    assert body["kind"] == "Table"
    assert [c["name"] for c in body["columnDefinitions"]] == ["Name", "Data", "Age"]
    assert body["rows"][0]["cells"][:2] == ["c", 2]
    assert body["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert body["rows"][0]["object"]["metadata"]["name"] == "c"


def test_kubectl_get_watch_keeps_the_table_columns(kubesim, apps, namespace, tmp_path):
    apps.create_namespaced_deployment(namespace, deployment("web", replicas=1))
    proc = subprocess.Popen(["kubectl", "--server", kubesim.url, "--cache-dir", str(tmp_path / "c"), "-n",
                             namespace, "get", "deploy", "-w"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        header = proc.stdout.readline().split()
        first = proc.stdout.readline().split()
        time.sleep(0.5)
        apps.patch_namespaced_deployment_scale("web", namespace, {"spec": {"replicas": 5}})
        update = proc.stdout.readline().split()
    finally:
        proc.kill()
        proc.wait()
    assert header == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert first[:2] == ["web", "0/1"]
    assert update[:2] == ["web", "0/5"]
