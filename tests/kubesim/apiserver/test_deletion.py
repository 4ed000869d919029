"""Deletion as the API server alone does it: finalizers, deletionTimestamp, Background/Foreground/Orphan
propagation recorded as finalizers, a namespace marked Terminating and finalized, and CRDs that start and stop
serving their kind. What follows (dependents, a namespace's content) is the controllers' and is tested in
tests/kubesim/cluster/test_garbage_collection.py."""

from __future__ import annotations

import json
import urllib.request
import uuid

import pytest
from kubernetes import client, watch
from kubernetes.client import ApiException

from tests.kubesim.conftest import deployment, exists, owned_configmap


def test_finalizers_hold_an_object_until_the_last_one_is_removed(core, namespace):
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "held", "finalizers": ["example.com/x"]}})
    result = core.delete_namespaced_config_map("held", namespace)
    assert result["metadata"]["deletionTimestamp"]  # the object, not a Status, while deletion is pending
    held = core.read_namespaced_config_map("held", namespace)
    assert held.metadata.deletion_timestamp is not None
    assert held.metadata.deletion_grace_period_seconds == 0
    with pytest.raises(ApiException) as e:
        core.patch_namespaced_config_map("held", namespace, {"metadata": {"finalizers": ["example.com/x", "new"]}})
    assert e.value.status == 422
    start = held.metadata.resource_version
    core.patch_namespaced_config_map("held", namespace, {"metadata": {"finalizers": None}})
    assert not exists(core.read_namespaced_config_map, "held", namespace)
    seen = [ev["type"] for ev in watch.Watch().stream(
        core.list_namespaced_config_map, namespace, resource_version=start, timeout_seconds=1)]
    assert seen == ["DELETED"]


def test_the_api_server_records_propagation_as_finalizers_and_leaves_dependents_to_the_collector(
        apps, core, namespace):
    # This server runs no kube-controller-manager: what a deletion does to dependents is the garbage
    # collector's (tests/kubesim/cluster/test_garbage_collection.py), so here only the marks are made.
    owner = apps.create_namespaced_deployment(namespace, deployment("web"))
    core.create_namespaced_config_map(namespace, owned_configmap("dep", owner, block=True))
    apps.delete_namespaced_deployment("web", namespace, body=client.V1DeleteOptions(propagation_policy="Foreground"))
    waiting = apps.read_namespaced_deployment("web", namespace)
    assert waiting.metadata.deletion_timestamp is not None
    assert waiting.metadata.finalizers == ["foregroundDeletion"]
    dep = core.read_namespaced_config_map("dep", namespace)
    assert dep.metadata.deletion_timestamp is None
    assert [r.uid for r in dep.metadata.owner_references] == [owner.metadata.uid]
    apps.create_namespaced_deployment(namespace, deployment("kept"))
    apps.delete_namespaced_deployment("kept", namespace, propagation_policy="Orphan")
    assert apps.read_namespaced_deployment("kept", namespace).metadata.finalizers == ["orphan"]


def test_removing_the_last_finalizer_removes_an_object_being_deleted(apps, namespace):
    apps.create_namespaced_deployment(namespace, deployment("web"))
    apps.delete_namespaced_deployment("web", namespace, propagation_policy="Orphan")
    apps.patch_namespaced_deployment("web", namespace, {"metadata": {"finalizers": None}})
    assert not exists(apps.read_namespaced_deployment, "web", namespace)


def test_delete_preconditions_are_checked(core, namespace):
    cm = core.create_namespaced_config_map(namespace, {"metadata": {"name": "c"}})
    core.patch_namespaced_config_map("c", namespace, {"data": {"a": "1"}})
    with pytest.raises(ApiException) as e:
        core.delete_namespaced_config_map("c", namespace, body=client.V1DeleteOptions(
            preconditions=client.V1Preconditions(resource_version=cm.metadata.resource_version)))
    assert e.value.status == 409
    assert exists(core.read_namespaced_config_map, "c", namespace)


def test_a_deleted_namespace_is_terminating_refuses_new_content_and_keeps_its_own(core, kubesim):
    name = "doomed-" + uuid.uuid4().hex[:6]
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    assert core.read_namespace(name).spec.finalizers == ["kubernetes"]
    core.create_namespaced_config_map(name, {"metadata": {"name": "c"}})
    core.delete_namespace(name)
    terminating = core.read_namespace(name)
    assert terminating.status.phase == "Terminating"
    assert terminating.metadata.deletion_timestamp is not None
    assert exists(core.read_namespaced_config_map, "c", name)  # emptying it is the namespace controller's
    with pytest.raises(ApiException) as e:
        core.create_namespaced_config_map(name, {"metadata": {"name": "late"}})
    assert e.value.status == 403
    assert json.loads(e.value.body)["message"] == (
        f'configmaps "late" is forbidden: unable to create new content in namespace {name} because it is '
        "being terminated")
    with pytest.raises(ApiException) as e:
        core.delete_namespace(name)
    assert e.value.status == 409


def test_a_finalized_terminating_namespace_is_removed_by_the_next_delete(core, kubesim):
    name = "doomed-" + uuid.uuid4().hex[:6]
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    core.delete_namespace(name)
    req = urllib.request.Request(f"{kubesim.url}/api/v1/namespaces/{name}/finalize", method="PUT",
                                 data=json.dumps({"metadata": {"name": name}, "spec": {"finalizers": []}}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as resp:
        assert json.loads(resp.read())["spec"]["finalizers"] == []
    assert core.read_namespace(name).status.phase == "Terminating"
    core.delete_namespace(name)
    assert not exists(core.read_namespace, name)


def test_creating_a_crd_serves_its_kind_and_deleting_it_stops(dyn, kubesim, kubectl):
    crds = dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    crds.create(body={
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object",
                                                              "x-kubernetes-preserve-unknown-fields": True}},
                               "subresources": {"status": {}}}]}})
    custom = client.CustomObjectsApi(dyn.client)
    custom.create_namespaced_custom_object("example.com", "v1", "default", "widgets", {
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"size": 3}})
    got = custom.get_namespaced_custom_object("example.com", "v1", "default", "widgets", "w1")
    assert got["spec"] == {"size": 3}
    assert "w1" in kubectl("get", "wd", "-o", "name").stdout
    crds.delete(name="widgets.example.com")
    with pytest.raises(ApiException) as e:
        custom.get_namespaced_custom_object("example.com", "v1", "default", "widgets", "w1")
    assert e.value.status == 404
    assert json.loads(e.value.body)["message"] == "the server could not find the requested resource"


def test_a_crd_name_must_match_its_names(dyn):
    crds = dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    with pytest.raises(Exception) as e:
        crds.create(body={"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                          "metadata": {"name": "wrong"},
                          "spec": {"group": "example.com", "scope": "Namespaced",
                                   "names": {"plural": "gadgets", "kind": "Gadget"},
                                   "versions": [{"name": "v1", "served": True, "storage": True}]}})
    assert e.value.status == 422


def test_legacy_orphan_dependents_false_answers_202_while_pending(kubesim, core, namespace):
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "held", "finalizers": ["example.com/x"]}})
    req = urllib.request.Request(f"{kubesim.url}/api/v1/namespaces/{namespace}/configmaps/held",
                                 data=json.dumps({"orphanDependents": False}).encode(), method="DELETE")
    with urllib.request.urlopen(req) as resp:
        assert resp.status == 202
        assert json.loads(resp.read())["metadata"]["deletionTimestamp"]
    core.patch_namespaced_config_map("held", namespace, {"metadata": {"finalizers": None}})
