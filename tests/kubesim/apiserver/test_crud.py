"""CRUD, Status errors, resourceVersion, generation, status isolation and the scale subresource."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client import ApiException
from kubernetes.dynamic.exceptions import DynamicApiError

from tests.kubesim.conftest import deployment


def status_of(exc: ApiException) -> dict:
    return json.loads(exc.body)


def test_create_get_list_replace_delete_a_configmap(core, namespace):
    created = core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="cfg"), data={"a": "1"}))
    assert created.metadata.namespace == namespace
    assert created.metadata.uid and created.metadata.creation_timestamp
    got = core.read_namespaced_config_map("cfg", namespace)
    assert got.data == {"a": "1"}
    listed = core.list_namespaced_config_map(namespace)
    assert [c.metadata.name for c in listed.items] == ["cfg"]
    got.data = {"a": "2"}
    replaced = core.replace_namespaced_config_map("cfg", namespace, got)
    assert replaced.data == {"a": "2"}
    assert int(replaced.metadata.resource_version) > int(got.metadata.resource_version)
    status = core.delete_namespaced_config_map("cfg", namespace)
    assert status["status"] == "Success"  # v37 returns delete results as plain dicts
    with pytest.raises(ApiException) as e:
        core.read_namespaced_config_map("cfg", namespace)
    assert e.value.status == 404


def test_missing_objects_get_not_found_with_the_apiserver_wording(apps, core, namespace):
    with pytest.raises(ApiException) as e:
        apps.read_namespaced_deployment("ghost", namespace)
    body = status_of(e.value)
    assert (body["code"], body["reason"]) == (404, "NotFound")
    assert body["message"] == 'deployments.apps "ghost" not found'
    assert body["details"] == {"name": "ghost", "group": "apps", "kind": "deployments"}
    with pytest.raises(ApiException) as e:
        core.delete_namespaced_secret("ghost", namespace)
    assert status_of(e.value)["message"] == 'secrets "ghost" not found'


def test_creating_an_existing_name_is_already_exists(apps, namespace):
    apps.create_namespaced_deployment(namespace, deployment("web"))
    with pytest.raises(ApiException) as e:
        apps.create_namespaced_deployment(namespace, deployment("web"))
    body = status_of(e.value)
    assert (body["code"], body["reason"]) == (409, "AlreadyExists")
    assert body["message"] == 'deployments.apps "web" already exists'


def test_stale_replace_is_a_conflict(apps, namespace):
    first = apps.create_namespaced_deployment(namespace, deployment("web"))
    fresh = apps.read_namespaced_deployment("web", namespace)
    fresh.spec.replicas = 4
    apps.replace_namespaced_deployment("web", namespace, fresh)
    first.spec.replicas = 9
    with pytest.raises(ApiException) as e:
        apps.replace_namespaced_deployment("web", namespace, first)
    body = status_of(e.value)
    assert body["reason"] == "Conflict"
    assert body["message"] == ('Operation cannot be fulfilled on deployments.apps "web": the object has been '
                               "modified; please apply your changes to the latest version and try again")
    assert apps.read_namespaced_deployment("web", namespace).spec.replicas == 4


def test_built_in_kinds_reject_missing_required_fields(dyn, core, namespace):
    body = deployment("broken")
    del body["spec"]["selector"]
    # the typed client refuses this body itself, so send it through the dynamic client
    with pytest.raises(DynamicApiError) as e:
        dyn.resources.get(api_version="apps/v1", kind="Deployment").create(body=body, namespace=namespace)
    status = json.loads(e.value.body)
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert status["message"] == 'Deployment.apps "broken" is invalid: spec.selector: Required value'
    assert status["details"]["causes"][0]["field"] == "spec.selector"
    pods = dyn.resources.get(api_version="v1", kind="Pod")
    with pytest.raises(DynamicApiError) as e:
        pods.create(body={"metadata": {"name": "p"}, "spec": {"containers": [{"image": "x"}]}}, namespace=namespace)
    assert json.loads(e.value.body)["details"]["causes"][0]["field"] == "spec.containers[0].name"
    with pytest.raises(ApiException) as e:
        core.create_namespaced_config_map(namespace, {"metadata": {}})
    assert status_of(e.value)["code"] == 422


def test_generate_name_adds_a_random_suffix(core, namespace):
    a = core.create_namespaced_config_map(namespace, {"metadata": {"generateName": "job-"}})
    b = core.create_namespaced_config_map(namespace, {"metadata": {"generateName": "job-"}})
    assert a.metadata.name.startswith("job-") and len(a.metadata.name) == len("job-") + 5
    assert a.metadata.name != b.metadata.name


def test_resource_version_moves_on_real_changes_only(core, namespace):
    cm = core.create_namespaced_config_map(namespace, {"metadata": {"name": "c"}, "data": {"k": "v"}})
    same = core.replace_namespaced_config_map("c", namespace, cm)
    assert same.metadata.resource_version == cm.metadata.resource_version
    patched = core.patch_namespaced_config_map("c", namespace, {"data": {"k": "v"}})
    assert patched.metadata.resource_version == cm.metadata.resource_version
    changed = core.patch_namespaced_config_map("c", namespace, {"data": {"k": "w"}})
    assert int(changed.metadata.resource_version) > int(cm.metadata.resource_version)
    other = core.create_namespaced_config_map(namespace, {"metadata": {"name": "d"}})
    assert int(other.metadata.resource_version) > int(changed.metadata.resource_version)


def test_generation_counts_spec_changes_not_metadata_or_status(apps, namespace):
    dep = apps.create_namespaced_deployment(namespace, deployment("web"))
    assert dep.metadata.generation == 1
    dep = apps.patch_namespaced_deployment("web", namespace, {"metadata": {"labels": {"team": "a"}}})
    assert dep.metadata.generation == 1
    dep = apps.patch_namespaced_deployment("web", namespace, {"spec": {"replicas": 3}})
    assert dep.metadata.generation == 2
    dep = apps.patch_namespaced_deployment_status("web", namespace, {"status": {"observedGeneration": 2,
                                                                                "replicas": 3}})
    assert dep.metadata.generation == 2
    assert dep.status.observed_generation == 2


def test_status_is_isolated_from_the_main_resource(apps, namespace):
    apps.create_namespaced_deployment(namespace, deployment("web"))
    apps.patch_namespaced_deployment_status("web", namespace, {"status": {"replicas": 1, "readyReplicas": 1}})
    dep = apps.patch_namespaced_deployment("web", namespace, {"status": {"readyReplicas": 7}})
    assert dep.status.ready_replicas == 1
    dep = apps.patch_namespaced_deployment_status("web", namespace, {"spec": {"replicas": 5},
                                                                     "status": {"readyReplicas": 2}})
    assert dep.spec.replicas == 1
    assert dep.status.ready_replicas == 2
    dep.status.ready_replicas = 3
    dep = apps.replace_namespaced_deployment_status("web", namespace, dep)
    assert dep.status.ready_replicas == 3


def test_scale_subresource_reads_and_writes_spec_replicas(apps, namespace):
    apps.create_namespaced_deployment(namespace, deployment("web", replicas=2))
    apps.patch_namespaced_deployment_status("web", namespace, {"status": {"replicas": 2}})
    scale = apps.read_namespaced_deployment_scale("web", namespace)
    assert (scale.spec.replicas, scale.status.replicas, scale.status.selector) == (2, 2, "app=web")
    scale = apps.patch_namespaced_deployment_scale("web", namespace, {"spec": {"replicas": 6}})
    assert scale.spec.replicas == 6
    assert apps.read_namespaced_deployment("web", namespace).spec.replicas == 6
    scale.spec.replicas = 1
    apps.replace_namespaced_deployment_scale("web", namespace, scale)
    assert apps.read_namespaced_deployment("web", namespace).spec.replicas == 1


def test_leaderworkerset_scale_uses_the_crd_paths(custom, namespace):
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "big"},
           "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 4}}}
    custom.create_namespaced_custom_object("leaderworkerset.x-k8s.io", "v1", namespace, "leaderworkersets", lws)
    custom.patch_namespaced_custom_object_status(
        "leaderworkerset.x-k8s.io", "v1", namespace, "leaderworkersets", "big",
        {"status": {"replicas": 2, "hpaPodSelector": "leaderworkerset.sigs.k8s.io/name=big"}})
    scale = custom.get_namespaced_custom_object_scale("leaderworkerset.x-k8s.io", "v1", namespace,
                                                      "leaderworkersets", "big")
    assert scale["spec"]["replicas"] == 2
    assert scale["status"] == {"replicas": 2, "selector": "leaderworkerset.sigs.k8s.io/name=big"}
    custom.patch_namespaced_custom_object_scale("leaderworkerset.x-k8s.io", "v1", namespace, "leaderworkersets",
                                                "big", {"spec": {"replicas": 5}})
    got = custom.get_namespaced_custom_object("leaderworkerset.x-k8s.io", "v1", namespace, "leaderworkersets",
                                              "big")
    assert got["spec"]["replicas"] == 5


def test_custom_resource_replace_needs_a_resource_version(custom, namespace):
    so = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "so"},
          "spec": {"scaleTargetRef": {"name": "web"}}}
    custom.create_namespaced_custom_object("keda.sh", "v1alpha1", namespace, "scaledobjects", so)
    with pytest.raises(ApiException) as e:
        custom.replace_namespaced_custom_object("keda.sh", "v1alpha1", namespace, "scaledobjects", "so", so)
    body = status_of(e.value)
    assert body["code"] == 422
    assert "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update" in body["message"]


def test_cluster_scoped_kinds_live_outside_namespaces(core):
    node = core.create_node({"metadata": {"name": "gpu-node-test", "labels": {"gpu": "h100"}}})
    assert node.metadata.namespace is None
    assert "gpu-node-test" in [n.metadata.name for n in core.list_node(label_selector="gpu=h100").items]
    core.delete_node("gpu-node-test")


def test_dry_run_validates_without_persisting(core, namespace):
    before = core.list_namespaced_config_map(namespace).metadata.resource_version
    cm = core.create_namespaced_config_map(namespace, {"metadata": {"name": "dry"}}, dry_run="All")
    assert cm.metadata.name == "dry"
    with pytest.raises(ApiException):
        core.read_namespaced_config_map("dry", namespace)
    assert core.list_namespaced_config_map(namespace).metadata.resource_version == before


def test_label_and_field_selectors_including_set_based(core, namespace):
    for name, tier in [("a", "fe"), ("b", "be"), ("c", "db")]:
        core.create_namespaced_config_map(namespace, {"metadata": {"name": name, "labels": {"tier": tier}}})
    names = lambda **kw: sorted(c.metadata.name for c in core.list_namespaced_config_map(namespace, **kw).items)  # noqa: E731
    assert names(label_selector="tier in (be,fe)") == ["a", "b"]
    assert names(label_selector="tier notin (be,fe)") == ["c"]
    assert names(label_selector="tier!=db") == ["a", "b"]
    assert names(label_selector="tier") == ["a", "b", "c"]
    assert names(label_selector="!tier") == []
    assert names(field_selector="metadata.name=b") == ["b"]
    assert names(field_selector="metadata.name!=b", label_selector="tier=fe") == ["a"]


def test_all_namespaces_list_spans_namespaces(core, namespace):
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "x", "labels": {"mark": namespace}}})
    items = core.list_config_map_for_all_namespaces(label_selector=f"mark={namespace}").items
    assert [(c.metadata.namespace, c.metadata.name) for c in items] == [(namespace, "x")]


def test_kubectl_get_yaml_scale_and_delete(kubectl, namespace, tmp_path):
    manifest = tmp_path / "d.json"
    manifest.write_text(json.dumps(deployment("web", replicas=2)))
    kubectl("-n", namespace, "apply", "--server-side", "-f", str(manifest))
    out = kubectl("-n", namespace, "get", "deploy", "web", "-o", "json").stdout
    assert json.loads(out)["spec"]["replicas"] == 2
    kubectl("-n", namespace, "scale", "deploy", "web", "--replicas=4")
    out = kubectl("-n", namespace, "get", "deploy", "web", "-o", "jsonpath={.spec.replicas}").stdout
    assert out == "4"
    out = kubectl("-n", namespace, "delete", "deploy", "web", "--timeout=20s").stdout
    assert 'deployment.apps "web" deleted' in out
    missing = kubectl("-n", namespace, "get", "deploy", "web", check=False)
    assert missing.returncode != 0
    assert 'Error from server (NotFound): deployments.apps "web" not found' in missing.stderr


def test_defaults_are_applied_like_the_apiserver(apps, namespace):
    body = deployment("web")
    del body["spec"]["replicas"]
    body["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"containerPort": 8000}]
    dep = apps.create_namespaced_deployment(namespace, body)
    assert dep.spec.replicas == 1
    assert dep.spec.strategy.type == "RollingUpdate"
    assert dep.spec.template.spec.containers[0].ports[0].protocol == "TCP"


def test_system_namespaces_may_not_be_deleted(core):
    with pytest.raises(ApiException) as e:
        core.delete_namespace("default")
    body = status_of(e.value)
    assert (body["code"], body["reason"]) == (403, "Forbidden")
    assert body["message"] == 'namespaces "default" is forbidden: this namespace may not be deleted'


def test_delete_collection_removes_only_selected_objects(core, namespace):
    for name, tier in [("a", "fe"), ("b", "be")]:
        core.create_namespaced_config_map(namespace, {"metadata": {"name": name, "labels": {"tier": tier}}})
    core.delete_collection_namespaced_config_map(namespace, label_selector="tier=fe")
    assert [c.metadata.name for c in core.list_namespaced_config_map(namespace).items] == ["b"]


def test_hpa_v2_requires_a_scale_target(dyn, namespace):
    hpas = dyn.resources.get(api_version="autoscaling/v2", kind="HorizontalPodAutoscaler")
    with pytest.raises(DynamicApiError) as e:
        hpas.create(namespace=namespace, body={"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                                               "metadata": {"name": "h"}, "spec": {"maxReplicas": 3}})
    fields = [c["field"] for c in json.loads(e.value.body)["details"]["causes"]]
    assert "spec.scaleTargetRef" in fields
    created = hpas.create(namespace=namespace, body={
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h"},
        "spec": {"maxReplicas": 3, "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}})
    assert created.spec.maxReplicas == 3


def test_list_items_missing_required_keys_are_invalid(dyn, namespace):
    body = deployment("web")
    body["spec"]["template"]["spec"]["containers"][0]["env"] = [{"value": "1"}]
    body["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "http"}]
    with pytest.raises(DynamicApiError) as e:
        dyn.resources.get(api_version="apps/v1", kind="Deployment").create(body=body, namespace=namespace)
    fields = sorted(c["field"] for c in json.loads(e.value.body)["details"]["causes"])
    assert fields == ["spec.template.spec.containers[0].env[0].name",
                      "spec.template.spec.containers[0].ports[0].containerPort"]
    with pytest.raises(DynamicApiError) as e:
        dyn.resources.get(api_version="v1", kind="Service").create(namespace=namespace, body={
            "metadata": {"name": "s"}, "spec": {"ports": [{"targetPort": 80}]}})
    assert [c["field"] for c in json.loads(e.value.body)["details"]["causes"]] == ["spec.ports[0].port"]
    with pytest.raises(DynamicApiError) as e:
        dyn.resources.get(api_version="v1", kind="ConfigMap").create(namespace=namespace, body={
            "metadata": {"name": "c", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x"}]}})
    assert json.loads(e.value.body)["details"]["causes"][0]["field"] == "metadata.ownerReferences[0].uid"


def test_generation_of_a_custom_resource_without_status_subresource_counts_status_too(custom, namespace):
    args = ("monitoring.coreos.com", "v1", namespace, "servicemonitors")
    custom.create_namespaced_custom_object(*args, {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
                                                   "metadata": {"name": "m"}, "spec": {"endpoints": []}})
    sm = custom.patch_namespaced_custom_object(*args, "m", {"status": {"seen": True}})
    assert sm["status"] == {"seen": True}
    assert sm["metadata"]["generation"] == 2
    sm = custom.patch_namespaced_custom_object(*args, "m", {"metadata": {"labels": {"a": "b"}}})
    assert sm["metadata"]["generation"] == 2


def test_dry_run_patch_apply_and_delete_change_nothing(core, dyn, namespace):
    cm = core.create_namespaced_config_map(namespace, {"metadata": {"name": "c"}, "data": {"a": "1"}})
    patched = core.patch_namespaced_config_map("c", namespace, {"data": {"a": "2"}}, dry_run="All")
    assert patched.data == {"a": "2"}
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
    applied = cms.server_side_apply(body={"apiVersion": "v1", "kind": "ConfigMap",
                                          "metadata": {"name": "new", "namespace": namespace}},
                                   field_manager="m", dry_run="All")
    assert applied.metadata.name == "new"
    core.delete_namespaced_config_map("c", namespace, dry_run="All")
    now = core.read_namespaced_config_map("c", namespace)
    assert (now.data, now.metadata.resource_version) == ({"a": "1"}, cm.metadata.resource_version)
    assert [c.metadata.name for c in core.list_namespaced_config_map(namespace).items] == ["c"]


def test_rbac_names_are_path_segments_and_other_names_subdomains(api_client, core, namespace):
    """`system:controller:x` is a valid ClusterRole name (upstream's ValidateRBACName), not a ConfigMap name."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    role = {"metadata": {"name": "system:controller:demo"}, "rules": []}
    assert rbac.create_cluster_role(role).metadata.name == "system:controller:demo"
    with pytest.raises(ApiException) as e:
        rbac.create_cluster_role({"metadata": {"name": ".."}, "rules": []})
    assert e.value.status == 422
    assert 'metadata.name: Invalid value: "..": may not be \'..\'' in status_of(e.value)["message"]
    with pytest.raises(ApiException) as e:
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "system:demo"}})
    assert e.value.status == 422
    assert "a lowercase RFC 1123 subdomain" in status_of(e.value)["message"]
