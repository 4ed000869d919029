"""Server-side apply: managedFields, conflicts with causes, co-ownership, force and field removal."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from kubernetes.dynamic.exceptions import ConflictError, DynamicApiError

from tests.kubesim.conftest import deployment


@pytest.fixture
def deployments(dyn):
    return dyn.resources.get(api_version="apps/v1", kind="Deployment")


def managers(obj) -> dict[str, dict]:
    return {(m["manager"], m["operation"]): m for m in obj["metadata"]["managedFields"]}


def apply(deployments, namespace, body, manager, force=False):
    body = json.loads(json.dumps(body))
    body["metadata"]["namespace"] = namespace
    return deployments.server_side_apply(body=body, field_manager=manager, force_conflicts=force).to_dict()


def test_apply_creates_the_object_and_records_managed_fields(deployments, namespace):
    dep = apply(deployments, namespace, deployment("web", replicas=2), "mgr-a")
    assert dep["spec"]["replicas"] == 2
    entry = managers(dep)[("mgr-a", "Apply")]
    assert entry["fieldsType"] == "FieldsV1" and entry["apiVersion"] == "apps/v1"
    fields = entry["fieldsV1"]
    assert "f:replicas" in fields["f:spec"]
    assert 'k:{"name":"app"}' in fields["f:spec"]["f:template"]["f:spec"]["f:containers"]
    assert "f:app" in fields["f:metadata"]["f:labels"]


def test_apply_with_a_different_value_for_another_managers_field_conflicts(deployments, namespace):
    apply(deployments, namespace, deployment("web", replicas=2), "mgr-a")
    with pytest.raises(ConflictError) as e:
        apply(deployments, namespace, deployment("web", replicas=5), "mgr-b")
    status = json.loads(e.value.body)
    assert status["code"] == 409 and status["reason"] == "Conflict"
    assert status["message"].startswith('Apply failed with 1 conflict: conflict with "mgr-a"')
    assert status["message"].endswith(": .spec.replicas")
    assert status["details"]["causes"] == [{"reason": "FieldManagerConflict", "message": 'conflict with "mgr-a" using apps/v1',
                                            "field": ".spec.replicas"}]


def test_the_same_value_makes_a_co_owner(deployments, namespace):
    apply(deployments, namespace, deployment("web", replicas=2), "mgr-a")
    dep = apply(deployments, namespace, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                                         "spec": {"replicas": 2}}, "mgr-b")
    owners = managers(dep)
    assert "f:replicas" in owners[("mgr-a", "Apply")]["fieldsV1"]["f:spec"]
    assert "f:replicas" in owners[("mgr-b", "Apply")]["fieldsV1"]["f:spec"]


def test_force_takes_ownership(deployments, namespace):
    apply(deployments, namespace, deployment("web", replicas=2), "mgr-a")
    dep = apply(deployments, namespace, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                                         "spec": {"replicas": 7}}, "mgr-b", force=True)
    assert dep["spec"]["replicas"] == 7
    owners = managers(dep)
    assert "f:replicas" not in owners[("mgr-a", "Apply")]["fieldsV1"]["f:spec"]
    assert "f:replicas" in owners[("mgr-b", "Apply")]["fieldsV1"]["f:spec"]


def test_non_apply_writes_own_fields_and_conflict_with_later_applies(deployments, apps, namespace):
    apps.create_namespaced_deployment(namespace, deployment("web", replicas=1))
    with pytest.raises(ConflictError) as e:
        apply(deployments, namespace, deployment("web", replicas=3), "mgr-a")
    assert 'conflict with "OpenAPI-Generator"' in json.loads(e.value.body)["message"]


def test_fields_an_applier_stops_sending_are_removed(deployments, namespace):
    body = deployment("web")
    body["metadata"]["labels"]["extra"] = "yes"
    body["spec"]["template"]["spec"]["containers"].append({"name": "side", "image": "s:1"})
    apply(deployments, namespace, body, "mgr-a")
    dep = apply(deployments, namespace, deployment("web"), "mgr-a")
    assert "extra" not in dep["metadata"]["labels"]
    assert [c["name"] for c in dep["spec"]["template"]["spec"]["containers"]] == ["app"]


def test_fields_still_owned_by_another_manager_are_kept(deployments, namespace):
    body = deployment("web")
    body["metadata"]["labels"]["shared"] = "yes"
    apply(deployments, namespace, body, "mgr-a")
    apply(deployments, namespace, {"apiVersion": "apps/v1", "kind": "Deployment",
                                   "metadata": {"name": "web", "labels": {"shared": "yes"}}}, "mgr-b")
    dep = apply(deployments, namespace, deployment("web"), "mgr-a")
    assert dep["metadata"]["labels"]["shared"] == "yes"


def test_apply_needs_a_field_manager(kubesim, namespace):
    req = urllib.request.Request(f"{kubesim.url}/apis/apps/v1/namespaces/{namespace}/deployments/web",
                                 data=json.dumps(deployment("web")).encode(), method="PATCH",
                                 headers={"Content-Type": "application/apply-patch+yaml"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req)
    assert e.value.code == 400
    assert json.loads(e.value.read())["message"] == "fieldManager is required for apply requests"


def test_apply_on_a_custom_resource_and_its_scale(dyn, namespace):
    lws = dyn.resources.get(api_version="leaderworkerset.x-k8s.io/v1", kind="LeaderWorkerSet")
    body = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "big", "namespace": namespace}, "spec": {"replicas": 2}}
    lws.server_side_apply(body=body, field_manager="ctl")
    lws.subresources["scale"].patch(name="big", namespace=namespace, body={"spec": {"replicas": 4}},
                                    content_type="application/merge-patch+json")
    with pytest.raises(DynamicApiError) as e:
        lws.server_side_apply(body=body, field_manager="ctl")
    assert e.value.status == 409
    got = lws.server_side_apply(body=body, field_manager="ctl", force_conflicts=True)
    assert got.spec.replicas == 2


def test_kubectl_server_side_apply_conflicts_after_scale(kubectl, namespace, tmp_path):
    manifest = tmp_path / "d.json"
    manifest.write_text(json.dumps(deployment("web", replicas=2)))
    first = kubectl("-n", namespace, "apply", "--server-side", "-f", str(manifest))
    assert "deployment.apps/web serverside-applied" in first.stdout
    kubectl("-n", namespace, "scale", "deploy", "web", "--replicas=5")
    again = kubectl("-n", namespace, "apply", "--server-side", "-f", str(manifest), check=False)
    assert again.returncode != 0
    assert "conflict" in again.stderr and ".spec.replicas" in again.stderr
    kubectl("-n", namespace, "apply", "--server-side", "--force-conflicts", "-f", str(manifest))
    out = kubectl("-n", namespace, "get", "deploy", "web", "-o", "jsonpath={.spec.replicas}").stdout
    assert out == "2"


def test_apply_to_the_status_subresource_touches_only_status(dyn, apps, namespace):
    apps.create_namespaced_deployment(namespace, deployment("web", replicas=2))
    status = dyn.resources.get(api_version="apps/v1", kind="Deployment").subresources["status"]
    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": namespace},
            "spec": {"replicas": 9}, "status": {"replicas": 2, "readyReplicas": 1}}
    status.server_side_apply(body=body, name="web", namespace=namespace, field_manager="ctrl")
    dep = apps.read_namespaced_deployment("web", namespace)
    assert (dep.spec.replicas, dep.status.ready_replicas) == (2, 1)
    entry = next(m for m in dep.metadata.managed_fields if m.manager == "ctrl")
    assert (entry.operation, entry.subresource) == ("Apply", "status")
    assert set(entry.fields_v1) == {"f:status"}


def test_kubectl_client_side_apply_twice_on_a_custom_resource(kubectl, custom, namespace, tmp_path):
    manifest = tmp_path / "gw.json"
    gw = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "metadata": {"name": "gw"},
          "spec": {"gatewayClassName": "a", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}}
    manifest.write_text(json.dumps(gw))
    assert "gateway.gateway.networking.k8s.io/gw created" in kubectl("-n", namespace, "apply", "-f",
                                                                      str(manifest)).stdout
    gw["spec"]["gatewayClassName"] = "b"
    manifest.write_text(json.dumps(gw))
    assert "configured" in kubectl("-n", namespace, "apply", "-f", str(manifest)).stdout
    got = custom.get_namespaced_custom_object("gateway.networking.k8s.io", "v1", namespace, "gateways", "gw")
    assert got["spec"]["gatewayClassName"] == "b"
    assert "kubectl.kubernetes.io/last-applied-configuration" in got["metadata"]["annotations"]


def test_apply_answers_201_when_it_creates_and_an_identical_apply_is_a_no_op(kubesim, namespace):
    url = f"{kubesim.url}/apis/apps/v1/namespaces/{namespace}/deployments/web?fieldManager=mgr-a"

    def send():
        req = urllib.request.Request(url, data=json.dumps(deployment("web")).encode(), method="PATCH",
                                     headers={"Content-Type": "application/apply-patch+yaml"})
        with urllib.request.urlopen(req) as resp:
            return resp.status, json.loads(resp.read())

    created_code, created = send()
    again_code, again = send()
    assert (created_code, again_code) == (201, 200)
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_finalizers_are_owned_value_by_value(dyn, core, namespace):
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")

    def apply_finalizers(manager, finalizers):
        body = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": namespace, "finalizers": finalizers}}
        return cms.server_side_apply(body=body, field_manager=manager).to_dict()

    apply_finalizers("ctrl-a", ["example.com/a"])
    both = apply_finalizers("ctrl-b", ["example.com/b"])
    assert both["metadata"]["finalizers"] == ["example.com/a", "example.com/b"]
    after = apply_finalizers("ctrl-a", [])
    assert after["metadata"]["finalizers"] == ["example.com/b"]
    core.patch_namespaced_config_map("c", namespace, {"metadata": {"finalizers": None}})
