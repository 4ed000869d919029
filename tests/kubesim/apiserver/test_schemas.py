"""OpenAPI v3 schemas (kubectl explain) and server-side field validation (fieldValidation Strict/Warn/Ignore)."""

from __future__ import annotations

import json
import urllib.request

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.kubesim.conftest import deployment

WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.schemas.example.com"},
    "spec": {
        "group": "schemas.example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "description": "A widget for the schema tests.",
                "properties": {
                    "spec": {"type": "object", "description": "What the widget should be.", "properties": {
                        "size": {"type": "integer", "description": "How many sprockets the widget has."},
                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    }},
                },
            }},
        }],
    },
}


def _request(url: str, method: str, body: dict, content_type: str = "application/json"):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method=method,
                                 headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers.get_all("Warning") or [], json.loads(resp.read())
    except urllib.error.HTTPError as error:
        return error.code, [], json.loads(error.read())


def test_kubectl_explain_reads_the_served_schemas(kubectl):
    out = kubectl("explain", "deployment.spec.replicas").stdout
    assert "KIND:       Deployment" in out
    assert "FIELD: replicas <integer>" in out
    assert "Number of desired pods." in out
    out = kubectl("explain", "pods.spec.containers.resources.limits").stdout
    assert "FIELD: limits <map[string]Quantity>" in out
    out = kubectl("explain", "deploy.spec.strategy.rollingUpdate.maxSurge").stdout
    assert "FIELD: maxSurge <IntOrString>" in out


def test_kubectl_explain_of_a_custom_kind_shows_its_crd_schema(dyn, kubectl):
    crds = dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    crds.create(body=WIDGET_CRD)
    out = kubectl("explain", "widgets.spec").stdout
    assert "GROUP:      schemas.example.com" in out and "KIND:       Widget" in out
    assert "size\t<integer>" in out and "How many sprockets the widget has." in out
    assert "FIELD: metadata <ObjectMeta>" in kubectl("explain", "widgets.metadata").stdout


def test_openapi_v3_documents_carry_kind_schemas(kubesim):
    with urllib.request.urlopen(kubesim.url + "/openapi/v3", timeout=10) as resp:
        index = json.loads(resp.read())
    with urllib.request.urlopen(kubesim.url + index["paths"]["apis/apps/v1"]["serverRelativeURL"], timeout=10) as r:
        doc = json.loads(r.read())
    schemas = doc["components"]["schemas"]
    deploy = schemas["io.k8s.api.apps.v1.Deployment"]
    assert deploy["x-kubernetes-group-version-kind"] == [{"group": "apps", "kind": "Deployment", "version": "v1"}]
    assert deploy["properties"]["spec"]["allOf"] == [{"$ref": "#/components/schemas/io.k8s.api.apps.v1.DeploymentSpec"}]
    # every reference resolves inside the document
    refs = {ref for ref in json.dumps(doc).split('"$ref":"')[1:]}
    for ref in refs:
        assert ref.split('"', 1)[0].removeprefix("#/components/schemas/") in schemas


def test_kubectl_apply_rejects_a_typo_with_the_apiservers_message(kubectl, namespace, tmp_path):
    body = deployment("typo")
    body["spec"]["replicass"] = 2
    manifest = tmp_path / "typo.json"
    manifest.write_text(json.dumps(body))
    proc = kubectl("-n", namespace, "apply", "-f", str(manifest), check=False)
    assert proc.returncode != 0
    assert ('Deployment in version "v1" cannot be handled as a Deployment: strict decoding error: '
            'unknown field "spec.replicass"') in proc.stderr
    proc = kubectl("-n", namespace, "apply", "--server-side", "-f", str(manifest), check=False)
    assert proc.returncode != 0
    assert (f"failed to create typed patch object ({namespace}/typo; apps/v1, Kind=Deployment): "
            ".spec.replicass: field not declared in schema") in proc.stderr
    proc = kubectl("-n", namespace, "get", "deploy", "typo", check=False)
    assert proc.returncode != 0  # nothing was created


def test_kubectl_validate_warn_warns_and_drops_the_field(kubectl, apps, namespace, tmp_path):
    body = deployment("warned")
    body["spec"]["template"]["spec"]["containers"][0]["imagee"] = "x"
    manifest = tmp_path / "warned.json"
    manifest.write_text(json.dumps(body))
    proc = kubectl("-n", namespace, "apply", "--validate=warn", "-f", str(manifest))
    assert 'Warning: unknown field "spec.template.spec.containers[0].imagee"' in proc.stderr
    stored = apps.api_client.sanitize_for_serialization(apps.read_namespaced_deployment("warned", namespace))
    assert "imagee" not in stored["spec"]["template"]["spec"]["containers"][0]


def test_official_client_strict_create_update_and_patch(custom, apps, namespace):
    # the typed APIs refuse unknown fields client-side, so the untyped object API sends them (as kubectl would)
    args = ("apps", "v1", namespace, "deployments")
    body = deployment("strict-client")
    body["spec"]["replicass"] = 2
    with pytest.raises(ApiException) as caught:
        custom.create_namespaced_custom_object(*args, body, field_validation="Strict")
    assert caught.value.status == 400
    status = json.loads(caught.value.body)
    assert status["reason"] == "BadRequest"
    assert status["message"] == ('Deployment in version "v1" cannot be handled as a Deployment: strict decoding '
                                 'error: unknown field "spec.replicass"')
    created = custom.create_namespaced_custom_object(*args, deployment("strict-client"), field_validation="Strict")
    with pytest.raises(ApiException) as caught:
        custom.patch_namespaced_custom_object(*args, "strict-client", {"spec": {"paused": True, "pasued": True}},
                                              field_validation="Strict")
    assert json.loads(caught.value.body)["message"] == 'strict decoding error: unknown field "spec.pasued"'
    created["metadata"]["labels"]["extra"] = "yes"
    created["spec"]["template"]["spec"]["nodeSelecter"] = {"a": "b"}
    with pytest.raises(ApiException) as caught:
        custom.replace_namespaced_custom_object(*args, "strict-client", created, field_validation="Strict")
    assert 'unknown field "spec.template.spec.nodeSelecter"' in json.loads(caught.value.body)["message"]
    assert "extra" not in apps.read_namespaced_deployment("strict-client", namespace).metadata.labels
    assert apps.read_namespaced_deployment("strict-client", namespace).spec.paused is None


def test_default_is_warn_with_one_header_per_field_and_ignore_is_silent(kubesim, namespace):
    url = f"{kubesim.url}/api/v1/namespaces/{namespace}/configmaps"
    code, warnings, obj = _request(url, "POST", {"metadata": {"name": "w", "labelz": {}}, "data": {"a": "1"},
                                                 "datta": {}})
    assert code == 201
    # one warning per field, in the order of the document
    assert warnings == ['299 - "unknown field \\"metadata.labelz\\""', '299 - "unknown field \\"datta\\""']
    assert "datta" not in obj and "labelz" not in obj["metadata"]
    code, warnings, obj = _request(url + "?fieldValidation=Ignore", "POST", {"metadata": {"name": "i"}, "datta": {}})
    assert (code, warnings) == (201, [])
    assert "datta" not in obj
    code, _, status = _request(url + "?fieldValidation=Sometimes", "POST", {"metadata": {"name": "x"}})
    assert code == 400 and "fieldValidation" in status["message"]


def test_strategic_merge_directives_are_not_unknown_fields(kubesim, apps, namespace):
    apps.create_namespaced_deployment(namespace, deployment("smp"))
    url = f"{kubesim.url}/apis/apps/v1/namespaces/{namespace}/deployments/smp?fieldValidation=Strict"
    patch = {"spec": {"template": {"spec": {"$setElementOrder/containers": [{"name": "app"}],
                                            "containers": [{"name": "app", "image": "nginx:1.28"}]}}}}
    code, _, obj = _request(url, "PATCH", patch, "application/strategic-merge-patch+json")
    assert code == 200
    assert obj["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.28"


def test_custom_resources_are_validated_against_their_crd_schema(dyn, custom, namespace):
    crds = dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    if not any(c.metadata.name == WIDGET_CRD["metadata"]["name"] for c in crds.get().items):
        crds.create(body=WIDGET_CRD)
    widget = {"apiVersion": "schemas.example.com/v1", "kind": "Widget", "metadata": {"name": "w1"},
              "spec": {"size": 3, "colour": "red", "extra": {"anything": {"goes": 1}}}}
    with pytest.raises(ApiException) as caught:
        custom.create_namespaced_custom_object("schemas.example.com", "v1", namespace, "widgets", widget,
                                               field_validation="Strict")
    assert json.loads(caught.value.body)["message"] == (
        'Widget in version "v1" cannot be handled as a Widget: strict decoding error: unknown field "spec.colour"')
    stored = custom.create_namespaced_custom_object("schemas.example.com", "v1", namespace, "widgets", widget)
    assert stored["spec"] == {"size": 3, "extra": {"anything": {"goes": 1}}}
    # the preinstalled CRDs preserve unknown fields, as their upstream schemas do for the kubesim subset
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "l"},
           "spec": {"anyField": 1}}
    made = custom.create_namespaced_custom_object("leaderworkerset.x-k8s.io", "v1", namespace, "leaderworkersets",
                                                  lws, field_validation="Strict")
    assert made["spec"] == {"anyField": 1}


def test_server_side_apply_through_the_dynamic_client_refuses_unknown_fields(dyn, namespace):
    deployments = dyn.resources.get(api_version="apps/v1", kind="Deployment")
    body = deployment("ssa-typo")
    body["metadata"]["namespace"] = namespace
    body["spec"]["template"]["spec"]["containers"][0]["portz"] = []
    with pytest.raises(client.exceptions.ApiException) as caught:
        deployments.server_side_apply(body=body, field_manager="tests")
    assert caught.value.status == 400
    assert json.loads(caught.value.body)["message"] == (
        f"failed to create typed patch object ({namespace}/ssa-typo; apps/v1, Kind=Deployment): "
        '.spec.template.spec.containers[name="app"].portz: field not declared in schema')
