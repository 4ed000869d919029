"""The three non-apply patch types, over HTTP with the official client and kubectl."""

from __future__ import annotations

import json

import pytest
from kubernetes.client import ApiException
from kubernetes.dynamic.exceptions import DynamicApiError

from tests.kubesim.conftest import deployment


def pod_template(apps, namespace, name="web"):
    return apps.read_namespaced_deployment(name, namespace).spec.template.spec


def test_strategic_merge_patch_merges_containers_env_and_ports_by_key(apps, namespace):
    body = deployment("web")
    body["spec"]["template"]["spec"]["containers"] = [
        {"name": "app", "image": "a:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
         "ports": [{"containerPort": 8000}], "volumeMounts": [{"name": "v", "mountPath": "/data"}]},
        {"name": "side", "image": "s:1"},
    ]
    body["spec"]["template"]["spec"]["volumes"] = [{"name": "v", "emptyDir": {}}]
    apps.create_namespaced_deployment(namespace, body)
    apps.patch_namespaced_deployment("web", namespace, {"spec": {"template": {"spec": {
        "containers": [{"name": "app", "image": "a:2", "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}],
                        "ports": [{"containerPort": 9000}],
                        "volumeMounts": [{"mountPath": "/data", "readOnly": True}]}],
        "volumes": [{"name": "w", "emptyDir": {}}]}}}})
    spec = pod_template(apps, namespace)
    assert [c.name for c in spec.containers] == ["app", "side"]
    app = spec.containers[0]
    assert app.image == "a:2"
    assert [(e.name, e.value) for e in app.env] == [("A", "1"), ("B", "3"), ("C", "4")]
    assert [p.container_port for p in app.ports] == [8000, 9000]
    assert (app.volume_mounts[0].name, app.volume_mounts[0].read_only) == ("v", True)
    assert [v.name for v in spec.volumes] == ["v", "w"]


def test_strategic_merge_patch_honours_patch_delete(apps, namespace):
    body = deployment("web")
    body["spec"]["template"]["spec"]["containers"].append({"name": "side", "image": "s:1"})
    apps.create_namespaced_deployment(namespace, body)
    apps.patch_namespaced_deployment("web", namespace, {"spec": {"template": {"spec": {
        "containers": [{"name": "side", "$patch": "delete"}]}}}})
    assert [c.name for c in pod_template(apps, namespace).containers] == ["app"]


def test_merge_patch_replaces_lists_and_null_deletes(apps, dyn, namespace):
    body = deployment("web")
    body["spec"]["template"]["spec"]["containers"].append({"name": "side", "image": "s:1"})
    body["metadata"]["annotations"] = {"keep": "1", "drop": "1"}
    apps.create_namespaced_deployment(namespace, body)
    res = dyn.resources.get(api_version="apps/v1", kind="Deployment")
    res.patch(name="web", namespace=namespace, content_type="application/merge-patch+json", body={
        "metadata": {"annotations": {"drop": None}},
        "spec": {"template": {"spec": {"containers": [{"name": "only", "image": "o:1"}]}}}})
    dep = apps.read_namespaced_deployment("web", namespace)
    assert dep.metadata.annotations == {"keep": "1"}
    assert [c.name for c in dep.spec.template.spec.containers] == ["only"]


def test_json_patch_applies_operations_and_a_failed_test_is_unprocessable(apps, namespace):
    apps.create_namespaced_deployment(namespace, deployment("web", replicas=1))
    dep = apps.patch_namespaced_deployment("web", namespace, [
        {"op": "test", "path": "/spec/replicas", "value": 1},
        {"op": "replace", "path": "/spec/replicas", "value": 3},
        {"op": "add", "path": "/metadata/labels/tier", "value": "fe"}])
    assert dep.spec.replicas == 3
    assert dep.metadata.labels["tier"] == "fe"
    with pytest.raises(ApiException) as e:
        apps.patch_namespaced_deployment("web", namespace, [{"op": "test", "path": "/spec/replicas", "value": 1},
                                                             {"op": "replace", "path": "/spec/replicas", "value": 9}])
    assert e.value.status == 422
    assert apps.read_namespaced_deployment("web", namespace).spec.replicas == 3


def test_strategic_merge_patch_on_a_custom_resource_is_unsupported_media_type(dyn, custom, namespace):
    custom.create_namespaced_custom_object("gateway.networking.k8s.io", "v1", namespace, "httproutes", {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": "r"},
        "spec": {"parentRefs": [{"name": "gw"}]}})
    routes = dyn.resources.get(api_version="gateway.networking.k8s.io/v1", kind="HTTPRoute")
    with pytest.raises(DynamicApiError) as e:
        routes.patch(name="r", namespace=namespace, body={"metadata": {"labels": {"a": "b"}}})
    assert e.value.status == 415
    assert json.loads(e.value.body)["reason"] == "UnsupportedMediaType"
    patched = routes.patch(name="r", namespace=namespace, body={"metadata": {"labels": {"a": "b"}}},
                           content_type="application/merge-patch+json")
    assert patched.metadata.labels.a == "b"


def test_a_patch_carrying_a_stale_resource_version_conflicts(core, namespace):
    cm = core.create_namespaced_config_map(namespace, {"metadata": {"name": "c"}, "data": {"a": "1"}})
    core.patch_namespaced_config_map("c", namespace, {"data": {"a": "2"}})
    with pytest.raises(ApiException) as e:
        core.patch_namespaced_config_map("c", namespace, {"metadata": {"resourceVersion": cm.metadata.resource_version},
                                                          "data": {"a": "3"}})
    assert e.value.status == 409
    assert json.loads(e.value.body)["reason"] == "Conflict"


def test_kubectl_patch_strategic_and_merge(kubectl, apps, custom, namespace):
    apps.create_namespaced_deployment(namespace, deployment("web"))
    kubectl("-n", namespace, "patch", "deploy", "web", "-p",
            json.dumps({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:2"}]}}}}))
    assert pod_template(apps, namespace).containers[0].image == "nginx:2"
    custom.create_namespaced_custom_object("keda.sh", "v1alpha1", namespace, "scaledobjects", {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "so"},
        "spec": {"scaleTargetRef": {"name": "web"}, "minReplicaCount": 1}})
    kubectl("-n", namespace, "patch", "scaledobject", "so", "--type=merge", "-p", '{"spec":{"minReplicaCount":0}}')
    so = custom.get_namespaced_custom_object("keda.sh", "v1alpha1", namespace, "scaledobjects", "so")
    assert so["spec"]["minReplicaCount"] == 0
