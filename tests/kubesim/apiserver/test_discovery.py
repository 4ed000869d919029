"""Discovery, OpenAPI and auth as the official client and kubectl consume them."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from kubernetes import client

from tests.kubesim.conftest import api_client_for, deployment

AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


def get_json(url: str, accept: str | None = None, token: str | None = None):
    req = urllib.request.Request(url)
    if accept:
        req.add_header("Accept", accept)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req) as resp:
        return resp.headers.get("Content-Type"), json.loads(resp.read())


def test_version_reports_a_kubernetes_version(kubesim):
    _, body = get_json(kubesim.url + "/version")
    assert body["major"] == "1"
    assert body["gitVersion"].startswith("v1.")


def test_apis_lists_every_group_with_preferred_version_first(kubesim):
    ctype, body = get_json(kubesim.url + "/apis")
    assert ctype.startswith("application/json")
    groups = {g["name"]: g for g in body["groups"]}
    for name in ("apps", "autoscaling", "policy", "apiextensions.k8s.io", "leaderworkerset.x-k8s.io", "keda.sh",
                 "gateway.networking.k8s.io", "inference.networking.k8s.io", "monitoring.coreos.com"):
        assert name in groups, name
    autoscaling = groups["autoscaling"]
    assert autoscaling["preferredVersion"]["groupVersion"] == "autoscaling/v2"
    assert [v["version"] for v in autoscaling["versions"]] == ["v2", "v1"]


def test_resource_list_names_status_and_scale_subresources(kubesim):
    _, body = get_json(kubesim.url + "/apis/apps/v1")
    by_name = {r["name"]: r for r in body["resources"]}
    assert by_name["deployments"]["shortNames"] == ["deploy"]
    assert by_name["deployments"]["singularName"] == "deployment"
    assert by_name["deployments/status"]["kind"] == "Deployment"
    scale = by_name["deployments/scale"]
    assert (scale["group"], scale["version"], scale["kind"]) == ("autoscaling", "v1", "Scale")
    _, lws = get_json(kubesim.url + "/apis/leaderworkerset.x-k8s.io/v1")
    assert {"leaderworkersets", "leaderworkersets/status", "leaderworkersets/scale"} <= {
        r["name"] for r in lws["resources"]}
    _, core = get_json(kubesim.url + "/api/v1")
    core_kinds = {r["kind"] for r in core["resources"]}
    assert {"Namespace", "Node", "Pod", "Service", "Endpoints", "ConfigMap", "Secret", "Event",
            "PersistentVolumeClaim", "ResourceQuota", "ServiceAccount"} <= core_kinds


def test_aggregated_discovery_only_when_asked_and_with_its_content_type(kubesim):
    ctype, body = get_json(kubesim.url + "/apis", accept=AGGREGATED + ",application/json")
    assert ctype == AGGREGATED
    assert body["kind"] == "APIGroupDiscoveryList"
    apps = next(i for i in body["items"] if i["metadata"].get("name") == "apps")
    deploy = next(r for r in apps["versions"][0]["resources"] if r["resource"] == "deployments")
    assert deploy["scope"] == "Namespaced"
    assert {s["subresource"] for s in deploy["subresources"]} == {"status", "scale"}
    ctype, core = get_json(kubesim.url + "/api", accept=AGGREGATED)
    assert ctype == AGGREGATED
    assert core["items"][0]["metadata"] == {}
    ctype, legacy = get_json(kubesim.url + "/api")
    assert legacy["kind"] == "APIVersions"


def test_unknown_paths_get_a_not_found_status(kubesim):
    with pytest.raises(urllib.error.HTTPError) as e:
        get_json(kubesim.url + "/apis/nope.example.com/v1/widgets")
    assert e.value.code == 404
    body = json.loads(e.value.read())
    assert body["kind"] == "Status"
    assert body["message"] == "the server could not find the requested resource"


def test_openapi_v3_index_lists_every_group_version_with_field_validation(kubesim):
    _, index = get_json(kubesim.url + "/openapi/v3")
    assert "apis/apps/v1" in index["paths"] and "api/v1" in index["paths"]
    assert "apis/keda.sh/v1alpha1" in index["paths"]
    _, doc = get_json(kubesim.url + index["paths"]["apis/apps/v1"]["serverRelativeURL"])
    patch = doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"]["kind"] == "Deployment"
    assert any(p["name"] == "fieldValidation" for p in patch["parameters"])


def test_dynamic_client_finds_kinds_and_subresources(dyn):
    deploy = dyn.resources.get(api_version="apps/v1", kind="Deployment")
    assert deploy.namespaced
    assert "scale" in deploy.subresources and "status" in deploy.subresources
    hpa = dyn.resources.get(api_version="autoscaling/v2", kind="HorizontalPodAutoscaler")
    assert hpa.name == "horizontalpodautoscalers"
    for api_version, kind in [("keda.sh/v1alpha1", "ScaledObject"), ("gateway.networking.k8s.io/v1", "HTTPRoute"),
                              ("inference.networking.k8s.io/v1", "InferencePool"),
                              ("monitoring.coreos.com/v1", "ServiceMonitor"),
                              ("policy/v1", "PodDisruptionBudget")]:
        assert dyn.resources.get(api_version=api_version, kind=kind).kind == kind


def test_kubectl_resolves_short_names_and_categories(kubectl, namespace):
    kubectl("-n", namespace, "create", "deployment", "web", "--image=nginx")
    out = kubectl("-n", namespace, "get", "deploy,lws,cm").stdout
    assert "web" in out
    out = kubectl("-n", namespace, "get", "all", "-o", "name").stdout
    assert "deployment.apps/web" in out
    resources = kubectl("api-resources").stdout
    assert "leaderworkersets" in resources and "lws" in resources


def test_kubectl_apply_passes_strict_validation(kubectl, namespace, tmp_path):
    manifest = tmp_path / "d.json"
    manifest.write_text(json.dumps(deployment("strict")))
    out = kubectl("-n", namespace, "apply", "-f", str(manifest)).stdout
    assert "deployment.apps/strict created" in out
    out = kubectl("-n", namespace, "apply", "--server-side", "-f", str(manifest)).stdout
    assert "serverside-applied" in out


def test_a_token_server_rejects_requests_without_the_bearer_token(kubesim_factory):
    server = kubesim_factory(token="s3cret")
    with pytest.raises(urllib.error.HTTPError) as e:
        get_json(server.url + "/api/v1/namespaces")
    assert e.value.code == 401
    assert json.loads(e.value.read())["reason"] == "Unauthorized"
    core = client.CoreV1Api(api_client_for(server, token="s3cret"))
    names = [n.metadata.name for n in core.list_namespace().items]
    assert "default" in names
