"""Deletion: finalizers, deletionTimestamp, Background/Foreground/Orphan propagation, garbage collection,
namespace deletion, and CRDs that start and stop serving their kind."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from kubernetes import client, watch
from kubernetes.client import ApiException

from tests.kubesim.conftest import deployment


def owned_configmap(name: str, owner, block: bool = False, finalizers: list[str] | None = None) -> dict:
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": owner.metadata.name, "uid": owner.metadata.uid,
           "blockOwnerDeletion": block}
    meta = {"name": name, "ownerReferences": [ref]}
    if finalizers:
        meta["finalizers"] = finalizers
    return {"metadata": meta}


def exists(read, *args) -> bool:
    try:
        read(*args)
        return True
    except ApiException as e:
        assert e.status == 404
        return False


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


def test_background_deletion_collects_dependents(apps, core, namespace):
    owner = apps.create_namespaced_deployment(namespace, deployment("web"))
    core.create_namespaced_config_map(namespace, owned_configmap("dep", owner))
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "free"}})
    status = apps.delete_namespaced_deployment("web", namespace)
    assert status["status"] == "Success"
    assert not exists(core.read_namespaced_config_map, "dep", namespace)
    assert exists(core.read_namespaced_config_map, "free", namespace)


def test_a_dependent_with_another_live_owner_survives(apps, core, namespace):
    a = apps.create_namespaced_deployment(namespace, deployment("a"))
    b = apps.create_namespaced_deployment(namespace, deployment("b"))
    body = owned_configmap("shared", a)
    body["metadata"]["ownerReferences"] += owned_configmap("x", b)["metadata"]["ownerReferences"]
    core.create_namespaced_config_map(namespace, body)
    apps.delete_namespaced_deployment("a", namespace)
    survivor = core.read_namespaced_config_map("shared", namespace)
    assert [r.uid for r in survivor.metadata.owner_references] == [b.metadata.uid]


def test_orphan_deletion_keeps_dependents_without_the_reference(apps, core, namespace):
    owner = apps.create_namespaced_deployment(namespace, deployment("web"))
    core.create_namespaced_config_map(namespace, owned_configmap("dep", owner))
    apps.delete_namespaced_deployment("web", namespace, propagation_policy="Orphan")
    assert not exists(apps.read_namespaced_deployment, "web", namespace)
    orphan = core.read_namespaced_config_map("dep", namespace)
    assert orphan.metadata.owner_references is None


def test_foreground_deletion_waits_for_blocking_dependents(apps, core, namespace):
    owner = apps.create_namespaced_deployment(namespace, deployment("web"))
    core.create_namespaced_config_map(namespace, owned_configmap("dep", owner, block=True,
                                                                 finalizers=["example.com/hold"]))
    apps.delete_namespaced_deployment("web", namespace, body=client.V1DeleteOptions(propagation_policy="Foreground"))
    waiting = apps.read_namespaced_deployment("web", namespace)
    assert waiting.metadata.deletion_timestamp is not None
    assert "foregroundDeletion" in waiting.metadata.finalizers
    dep = core.read_namespaced_config_map("dep", namespace)
    assert dep.metadata.deletion_timestamp is not None
    core.patch_namespaced_config_map("dep", namespace, {"metadata": {"finalizers": None}})
    assert not exists(core.read_namespaced_config_map, "dep", namespace)
    assert not exists(apps.read_namespaced_deployment, "web", namespace)


def test_delete_preconditions_are_checked(core, namespace):
    cm = core.create_namespaced_config_map(namespace, {"metadata": {"name": "c"}})
    core.patch_namespaced_config_map("c", namespace, {"data": {"a": "1"}})
    with pytest.raises(ApiException) as e:
        core.delete_namespaced_config_map("c", namespace, body=client.V1DeleteOptions(
            preconditions=client.V1Preconditions(resource_version=cm.metadata.resource_version)))
    assert e.value.status == 409
    assert exists(core.read_namespaced_config_map, "c", namespace)


def test_deleting_a_namespace_deletes_its_contents(core):
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="doomed")))
    core.create_namespaced_config_map("doomed", {"metadata": {"name": "c"}})
    core.delete_namespace("doomed")
    assert not exists(core.read_namespace, "doomed")
    assert core.list_config_map_for_all_namespaces(field_selector="metadata.namespace=doomed").items == []


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


def test_an_object_whose_owners_are_gone_is_collected(core, namespace):
    body = {"metadata": {"name": "stray", "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "gone", "uid": "0d4c9d8e-0000-4000-8000-000000000000"}]}}
    core.create_namespaced_config_map(namespace, body)
    deadline = time.monotonic() + 5
    while exists(core.read_namespaced_config_map, "stray", namespace) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not exists(core.read_namespaced_config_map, "stray", namespace)


def test_legacy_orphan_dependents_false_answers_202_while_pending(kubesim, core, namespace):
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "held", "finalizers": ["example.com/x"]}})
    req = urllib.request.Request(f"{kubesim.url}/api/v1/namespaces/{namespace}/configmaps/held",
                                 data=json.dumps({"orphanDependents": False}).encode(), method="DELETE")
    with urllib.request.urlopen(req) as resp:
        assert resp.status == 202
        assert json.loads(resp.read())["metadata"]["deletionTimestamp"]
    core.patch_namespaced_config_map("held", namespace, {"metadata": {"finalizers": None}})
