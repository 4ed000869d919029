"""The admission chain runs in the API server alone, with no cluster behind it: ExtendedResourceToleration
mutates a GPU pod before ResourceQuota judges it, in kube-apiserver's order."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from kubesim.apiserver.admission.chain import PLUGINS
from tests.kubesim.conftest import api_client_for


def _gpu_pod(name: str, gpus: int) -> dict:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"nvidia.com/gpu": str(gpus)}}
    return {"metadata": {"name": name},
            "spec": {"containers": [{"name": "app", "image": "nginx:1.27", "resources": resources}]}}


@pytest.fixture(scope="module")
def core(kubesim_factory):
    def install(server):
        for plugin in PLUGINS:
            server.add_admission_hook(plugin)

    return client.CoreV1Api(api_client_for(kubesim_factory(configure=install)))


def test_a_gpu_pod_gets_the_toleration_and_a_pod_over_the_quota_is_refused(core):
    core.create_namespace({"metadata": {"name": "adm"}})
    core.create_namespaced_resource_quota("adm", {"metadata": {"name": "gpu-quota"},
                                                  "spec": {"hard": {"requests.nvidia.com/gpu": "2"}}})
    first = core.create_namespaced_pod("adm", _gpu_pod("first", 2))
    assert [t.to_dict() for t in first.spec.tolerations] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule", "toleration_seconds": None,
         "value": None}]
    with pytest.raises(ApiException) as e:
        core.create_namespaced_pod("adm", _gpu_pod("second", 1))
    assert e.value.status == 403
    assert json.loads(e.value.body)["message"] == (
        'pods "second" is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=1, '
        "used: requests.nvidia.com/gpu=2, limited: requests.nvidia.com/gpu=2")


def test_a_cpu_pod_gets_no_toleration(core):
    core.create_namespace({"metadata": {"name": "adm-cpu"}})
    pod = {"metadata": {"name": "plain"}, "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}}
    assert core.create_namespaced_pod("adm-cpu", pod).spec.tolerations is None
