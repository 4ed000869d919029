"""Every rendered built-in object is valid against the official Kubernetes 1.33 JSON schemas
(kubernetes-validate, strict: unknown fields fail too); custom resources get their required fields."""

import kubernetes_validate
import pytest

from apps.serving.rendering import render_service
from tests.serving.golden.specs import SPECS

BUILT_IN_GROUPS = {"v1", "apps/v1", "policy/v1", "rbac.authorization.k8s.io/v1", "autoscaling/v2",
                   "networking.k8s.io/v1"}
CUSTOM = {
    "leaderworkerset.x-k8s.io/v1": "LeaderWorkerSet",
    "keda.sh/v1alpha1": "ScaledObject",
    "inference.networking.k8s.io/v1": "InferencePool",
    "gateway.networking.k8s.io/v1": "HTTPRoute",
}


def all_objects() -> list:
    out = []
    for name in sorted(SPECS):
        for obj in render_service(SPECS[name]()):
            out.append(pytest.param(obj, id=f"{name}:{obj['kind']}/{obj['metadata']['name']}"))
    return out


@pytest.mark.parametrize("obj", all_objects())
def test_rendered_object_is_valid(obj):
    if obj["apiVersion"] in BUILT_IN_GROUPS:
        kubernetes_validate.validate(obj, "1.33", strict=True)
    else:
        assert CUSTOM[obj["apiVersion"]] == obj["kind"]
        assert obj["metadata"]["namespace"] == "tenant-acme"
        assert obj["spec"]


def test_an_invalid_object_is_caught_by_the_validator():
    # The check above is only worth something if the validator rejects a broken object.
    obj = next(o for o in render_service(SPECS["standard-vllm"]()) if o["kind"] == "Deployment")
    obj["spec"]["strategy"]["rollingUpdate"]["maxUnavailabel"] = 0
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(obj, "1.33", strict=True)


def test_lws_has_the_fields_the_leaderworkerset_api_requires():
    lws = next(o for o in render_service(SPECS["multi_node-vllm"]()) if o["kind"] == "LeaderWorkerSet")
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    assert template["leaderTemplate"]["spec"]["containers"] and template["workerTemplate"]["spec"]["containers"]
    # Each side is a valid pod template too.
    for side in ("leaderTemplate", "workerTemplate"):
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "x"}, "template": template[side]},
            "1.33", strict=True)
