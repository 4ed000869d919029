"""The garbage collector and the namespace controller, run as controllers beside the API server as
kube-controller-manager runs them: deletion of dependents follows the owner's deletion asynchronously, in the
order a watcher sees on Kubernetes, and their calls are authorized as their own ServiceAccounts."""

from __future__ import annotations

import time
import uuid

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.kubesim.cluster_support import deployment
from tests.kubesim.conftest import exists, owned_configmap
from tests.polling import wait_for
from tests.simcluster import cluster_starter

GC_ROLE = "system:controller:generic-garbage-collector"


@pytest.fixture(scope="module")
def cluster():
    with cluster_starter() as make:
        yield make()


@pytest.fixture
def namespace(cluster) -> str:
    name = "gc-" + uuid.uuid4().hex[:8]
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def events(list_fn, *args, since: str) -> list[tuple[str, str, int]]:
    """(type, name, resourceVersion) of every change since `since`, as a watcher sees them."""
    stream = watch.Watch().stream(list_fn, *args, resource_version=since, timeout_seconds=1)
    return [(ev["type"], ev["object"].metadata.name, int(ev["object"].metadata.resource_version)) for ev in stream]


def deleted_at(seen, name: str) -> int:
    return next(rv for kind, n, rv in seen if kind == "DELETED" and n == name)


def test_background_deletion_removes_the_owner_first_then_the_collector_its_dependents(cluster, namespace):
    core, apps = cluster.core, cluster.apps
    owner = apps.create_namespaced_deployment(namespace, deployment("web", replicas=0))
    core.create_namespaced_config_map(namespace, owned_configmap("dep", owner))
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "free"}})
    since = core.list_namespaced_config_map(namespace).metadata.resource_version
    status = apps.delete_namespaced_deployment("web", namespace)
    assert status["status"] == "Success"
    assert not exists(apps.read_namespaced_deployment, "web", namespace)  # the owner goes at once
    wait_for(lambda: not exists(core.read_namespaced_config_map, "dep", namespace), message="dependent collected")
    assert exists(core.read_namespaced_config_map, "free", namespace)
    owner_gone = deleted_at(events(apps.list_namespaced_deployment, namespace, since=since), "web")
    assert owner_gone < deleted_at(events(core.list_namespaced_config_map, namespace, since=since), "dep")


def test_a_dependent_with_another_live_owner_loses_only_the_reference(cluster, namespace):
    core, apps = cluster.core, cluster.apps
    a = apps.create_namespaced_deployment(namespace, deployment("a", replicas=0))
    b = apps.create_namespaced_deployment(namespace, deployment("b", replicas=0))
    body = owned_configmap("shared", a)
    body["metadata"]["ownerReferences"] += owned_configmap("x", b)["metadata"]["ownerReferences"]
    core.create_namespaced_config_map(namespace, body)
    apps.delete_namespaced_deployment("a", namespace)
    survivor = wait_for(lambda: (cm := core.read_namespaced_config_map("shared", namespace))
                        and len(cm.metadata.owner_references) == 1 and cm, message="reference to a removed")
    assert [r.uid for r in survivor.metadata.owner_references] == [b.metadata.uid]


def test_orphan_deletion_unlinks_the_dependents_before_the_owner_goes(cluster, namespace):
    core, apps = cluster.core, cluster.apps
    owner = apps.create_namespaced_deployment(namespace, deployment("web", replicas=0))
    core.create_namespaced_config_map(namespace, owned_configmap("dep", owner))
    since = core.list_namespaced_config_map(namespace).metadata.resource_version
    apps.delete_namespaced_deployment("web", namespace, propagation_policy="Orphan")
    wait_for(lambda: not exists(apps.read_namespaced_deployment, "web", namespace), message="owner removed")
    orphan = core.read_namespaced_config_map("dep", namespace)
    assert orphan.metadata.owner_references is None
    unlinked = [rv for kind, name, rv in events(core.list_namespaced_config_map, namespace, since=since)
                if (kind, name) == ("MODIFIED", "dep")]
    assert unlinked and unlinked[0] < deleted_at(events(apps.list_namespaced_deployment, namespace, since=since),
                                                 "web")


def test_foreground_deletion_keeps_the_owner_until_its_blocking_dependents_are_gone(cluster, namespace):
    core, apps = cluster.core, cluster.apps
    owner = apps.create_namespaced_deployment(namespace, deployment("web", replicas=0))
    core.create_namespaced_config_map(namespace, owned_configmap("dep", owner, block=True,
                                                                 finalizers=["example.com/hold"]))
    apps.delete_namespaced_deployment("web", namespace, body=client.V1DeleteOptions(propagation_policy="Foreground"))
    waiting = apps.read_namespaced_deployment("web", namespace)
    assert waiting.metadata.deletion_timestamp is not None
    assert "foregroundDeletion" in waiting.metadata.finalizers
    wait_for(lambda: core.read_namespaced_config_map("dep", namespace).metadata.deletion_timestamp,
             message="the collector deleting the dependent")
    assert exists(apps.read_namespaced_deployment, "web", namespace)  # held while its dependent is held
    core.patch_namespaced_config_map("dep", namespace, {"metadata": {"finalizers": None}})
    wait_for(lambda: not exists(apps.read_namespaced_deployment, "web", namespace), message="owner removed")
    assert not exists(core.read_namespaced_config_map, "dep", namespace)


def test_foreground_deletion_of_a_deployment_removes_pods_then_replicaset_then_deployment(cluster, namespace):
    core, apps = cluster.core, cluster.apps
    apps.create_namespaced_deployment(namespace, deployment("web", replicas=2))
    wait_for(lambda: len(core.list_namespaced_pod(namespace).items) == 2, message="two pods")
    replicaset = apps.list_namespaced_replica_set(namespace).items[0].metadata.name
    since = core.list_namespaced_pod(namespace).metadata.resource_version
    apps.delete_namespaced_deployment("web", namespace, body=client.V1DeleteOptions(propagation_policy="Foreground"))
    wait_for(lambda: not exists(apps.read_namespaced_deployment, "web", namespace), message="deployment removed")
    pods = [rv for kind, _name, rv in events(core.list_namespaced_pod, namespace, since=since) if kind == "DELETED"]
    rs_gone = deleted_at(events(apps.list_namespaced_replica_set, namespace, since=since), replicaset)
    deployment_gone = deleted_at(events(apps.list_namespaced_deployment, namespace, since=since), "web")
    assert len(pods) == 2
    assert max(pods) < rs_gone < deployment_gone


def test_an_object_whose_owners_are_gone_is_collected(cluster, namespace):
    body = {"metadata": {"name": "stray", "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "gone", "uid": "0d4c9d8e-0000-4000-8000-000000000000"}]}}
    cluster.core.create_namespaced_config_map(namespace, body)
    wait_for(lambda: not exists(cluster.core.read_namespaced_config_map, "stray", namespace),
             message="object with an absent owner collected")


def test_the_namespace_controller_empties_a_deleted_namespace_then_it_goes(cluster):
    core, apps = cluster.core, cluster.apps
    name = "doomed-" + uuid.uuid4().hex[:6]
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    apps.create_namespaced_deployment(name, deployment("web", replicas=1))
    wait_for(lambda: core.list_namespaced_pod(name).items, message="a pod")
    core.create_namespaced_config_map(name, {"metadata": {"name": "held", "finalizers": ["example.com/hold"]}})
    since = core.list_namespace().metadata.resource_version
    core.delete_namespace(name)
    assert core.read_namespace(name).status.phase == "Terminating"
    wait_for(lambda: [cm.metadata.name for cm in core.list_namespaced_config_map(name).items] == ["held"]
             and not core.list_namespaced_pod(name).items and not apps.list_namespaced_deployment(name).items,
             message="the namespace emptied but for the held object")
    assert core.read_namespace(name).spec.finalizers == ["kubernetes"]  # waits for the held object
    with pytest.raises(ApiException) as e:
        core.create_namespaced_config_map(name, {"metadata": {"name": "late"}})
    assert e.value.status == 403
    core.patch_namespaced_config_map("held", name, {"metadata": {"finalizers": None}})
    wait_for(lambda: not exists(core.read_namespace, name), message="namespace removed")
    seen = [(kind, rv) for kind, n, rv in events(core.list_namespace, since=since) if n == name]
    held_gone = deleted_at(events(core.list_config_map_for_all_namespaces, since=since), "held")
    assert [kind for kind, _rv in seen] == ["MODIFIED", "MODIFIED", "DELETED"]  # Terminating, finalized, gone
    assert seen[0][1] < held_gone < seen[1][1]


def test_under_rbac_the_collector_acts_as_its_service_account_and_waits_without_its_binding():
    with cluster_starter() as make:
        cluster = make(authorization="rbac")
        core, apps = cluster.core, cluster.apps
        rbac = client.RbacAuthorizationV1Api(cluster.api_client)
        binding = rbac.read_cluster_role_binding(GC_ROLE)
        assert [(s.kind, s.namespace, s.name) for s in binding.subjects] == [
            ("ServiceAccount", "kube-system", "generic-garbage-collector")]
        rbac.delete_cluster_role_binding(GC_ROLE)
        owner = apps.create_namespaced_deployment("default", deployment("web", replicas=0))
        core.create_namespaced_config_map("default", owned_configmap("dep", owner))
        apps.delete_namespaced_deployment("web", "default")
        time.sleep(1.5)  # several of the collector's retries (0.2 s apart): it was refused each time
        assert exists(core.read_namespaced_config_map, "dep", "default")
        rbac.create_cluster_role_binding({"metadata": {"name": GC_ROLE}, "roleRef": binding.role_ref.to_dict(),
                                          "subjects": [s.to_dict() for s in binding.subjects]})
        wait_for(lambda: not exists(core.read_namespaced_config_map, "dep", "default"),
                 message="dependent collected once the collector may again")
