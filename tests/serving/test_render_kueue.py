"""Kueue's objects as the renderer writes them on a cluster with Kueue (expected values worked out by hand from
Kueue's API: kueue.x-k8s.io/v1beta1, Cohort v1alpha1), the engine workloads' queue labels, and nothing of it
on a cluster without Kueue."""

from __future__ import annotations

import dataclasses

import jsonschema
import kubernetes_validate
import pytest

from apps.serving.rendering import render_service
from apps.serving.rendering.kueue import ClassSpec, FlavorQuota, KueueSpec, QueueQuota
from kubesim.apiserver.fieldvalidation import unknown_fields
from kubesim.apiserver.schemas import compile_crd, crd_version_schema
from kubesim.cluster.kueue_crds import kueue_crds
from tests.serving.golden.specs import SPECS

PRODUCTION = ClassSpec("production", 1000, "LowerPriority", "Serving that users wait on.")
BATCH = ClassSpec("batch", -10, "Never")
ACME = QueueQuota(name="acme", namespace="tenant-acme", cohort="west", weight=1.5,
                  flavors=(FlavorQuota("l4-24gb", 6, borrowing_limit=2, lending_limit=None),
                           FlavorQuota("h100-sxm-80gb", 4, borrowing_limit=None, lending_limit=0),
                           FlavorQuota("mi300x-192gb", 8)))
GLOBEX = QueueQuota(name="globex", namespace="tenant-globex", cohort="west", flavors=(FlavorQuota("l4-24gb", 6),))
KUEUE = KueueSpec(queue="acme", queues=(ACME, GLOBEX), running=PRODUCTION, classes=(PRODUCTION, BATCH))


def render(name: str, kueue=KUEUE) -> list[dict]:
    return render_service(dataclasses.replace(SPECS[name](), has_gateway=False, kueue=kueue))


def one(objects, kind, name=None) -> dict:
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"{kind}/{name}: {len(found)}"
    return found[0]


def test_a_cluster_queue_holds_the_tenants_quota_per_flavor_grouped_by_gpu_resource():
    queue = one(render("standard-vllm"), "ClusterQueue", "acme")
    assert queue["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    spec = queue["spec"]
    assert spec["cohort"] == "west"
    assert spec["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "tenant-acme"}}
    assert spec["resourceGroups"] == [
        {"coveredResources": ["amd.com/gpu"],
         "flavors": [{"name": "mi300x-192gb", "resources": [{"name": "amd.com/gpu", "nominalQuota": 8}]}]},
        {"coveredResources": ["nvidia.com/gpu"], "flavors": [
            {"name": "l4-24gb", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 6, "borrowingLimit": 2}]},
            {"name": "h100-sxm-80gb",
             "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 4, "lendingLimit": 0}]}]},
    ]
    assert spec["preemption"] == {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any",
                                  "borrowWithinCohort": {"policy": "Never"}}
    assert spec["fairSharing"] == {"weight": "1.5"}


def test_a_resource_flavor_per_gpu_type_selects_its_nodes_by_product_label():
    flavor = one(render("standard-vllm"), "ResourceFlavor", "l4-24gb")
    assert flavor["spec"] == {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-L4"}}
    assert {o["metadata"]["name"] for o in render("standard-vllm") if o["kind"] == "ResourceFlavor"} == {
        "l4-24gb", "h100-sxm-80gb", "mi300x-192gb"}


def test_the_tenant_queues_through_a_local_queue_in_its_namespace_and_the_cohort_exists():
    objects = render("standard-vllm")
    local = one(objects, "LocalQueue")
    assert (local["metadata"]["namespace"], local["spec"]) == ("tenant-acme", {"clusterQueue": "acme"})
    assert one(objects, "Cohort", "west")["apiVersion"] == "kueue.x-k8s.io/v1alpha1"


def test_every_queue_of_the_cohort_is_rendered_so_an_idle_lender_lends():
    lender = one(render("standard-vllm"), "ClusterQueue", "globex")["spec"]
    assert (lender["cohort"], lender["namespaceSelector"]["matchLabels"]) == (
        "west", {"kubernetes.io/metadata.name": "tenant-globex"})
    assert lender["resourceGroups"] == [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
        {"name": "l4-24gb", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 6}]}]}]


def test_each_class_is_a_workload_priority_class_and_a_pod_priority_class():
    objects = render("standard-vllm")
    assert (one(objects, "WorkloadPriorityClass", "production")["value"],
            one(objects, "WorkloadPriorityClass", "batch")["value"]) == (1000, -10)
    pod_class = one(objects, "PriorityClass", "batch")
    assert (pod_class["apiVersion"], pod_class["value"], pod_class["preemptionPolicy"], pod_class["globalDefault"]) \
        == ("scheduling.k8s.io/v1", -10, "Never", False)
    assert one(objects, "PriorityClass", "production")["preemptionPolicy"] == "PreemptLowerPriority"


@pytest.mark.parametrize("name, kind", [("standard-vllm", "Deployment"), ("pd_disaggregated-vllm", "Deployment"),
                                        ("multi_node-vllm", "LeaderWorkerSet")])
def test_engine_workloads_and_their_pods_name_the_local_queue_and_the_class(name, kind):
    wanted = {"kueue.x-k8s.io/queue-name": "gpus", "kueue.x-k8s.io/priority-class": "production"}
    workloads = [o for o in render(name) if o["kind"] == kind
                 and o["metadata"]["labels"]["app.kubernetes.io/component"] != "router"]
    assert len(workloads) == (2 if name.startswith("pd_") else 1)
    for workload in workloads:
        assert wanted.items() <= workload["metadata"]["labels"].items()
        spec = workload["spec"]
        templates = ([spec["template"]] if kind == "Deployment" else
                     [spec["leaderWorkerTemplate"]["leaderTemplate"], spec["leaderWorkerTemplate"]["workerTemplate"]])
        for template in templates:
            assert wanted.items() <= template["metadata"]["labels"].items()
            assert template["spec"]["priorityClassName"] == "production"


def test_routers_are_not_queued():
    router = one(render("pd_disaggregated-vllm"), "Deployment", "chat-router")
    assert "kueue.x-k8s.io/queue-name" not in router["spec"]["template"]["metadata"]["labels"]


def test_without_kueue_nothing_of_it_is_rendered():
    objects = render("multi_node-vllm", kueue=None)
    assert not [o for o in objects if o["apiVersion"].startswith("kueue.x-k8s.io") or o["kind"] == "PriorityClass"]
    assert "kueue.x-k8s.io" not in str(objects)


# --- against Kueue's CRD schemas, as kubesim serves them (kubesim/cluster/kueue_crds.py) ------------------------


def crd_schema(obj: dict) -> dict:
    group, version = obj["apiVersion"].split("/")
    crd = next(c for c in kueue_crds() if c["spec"]["group"] == group and c["spec"]["names"]["kind"] == obj["kind"])
    return crd_version_schema(crd, version)


def schema_errors(obj: dict) -> list[str]:
    """What Kueue's CRD schema refuses in `obj`: types, enums, required fields, patterns, and unknown fields
    (which a server-side apply refuses)."""
    schema = crd_schema(obj)
    found = [error.message for error in jsonschema.Draft7Validator(schema).iter_errors(obj)]
    return found + [f"unknown field {path}" for path, _ in unknown_fields(compile_crd(schema), obj, prune=False)]


def kueue_rendered() -> list:
    out = []
    for name in sorted(SPECS):
        for obj in render(name):
            if obj["apiVersion"].startswith("kueue.x-k8s.io/"):
                out.append(pytest.param(obj, id=f"{name}:{obj['kind']}/{obj['metadata']['name']}"))
    return out


@pytest.mark.parametrize("obj", kueue_rendered())
def test_every_kueue_object_is_valid_against_its_crd_schema(obj):
    assert schema_errors(obj) == []


def test_the_pod_priority_classes_are_valid_kubernetes_objects():
    for obj in render("standard-vllm"):
        if obj["kind"] == "PriorityClass":
            kubernetes_validate.validate(obj, "1.33", strict=True)


@pytest.mark.parametrize("breakage, words", [
    (lambda q: q["spec"].update(cohortName="west"), "unknown field spec.cohortName"),
    (lambda q: q["spec"]["preemption"].update(withinClusterQueue="Always"), "'Always' is not one of"),
    (lambda q: q["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0].pop("nominalQuota"),
     "'nominalQuota' is a required property"),
    (lambda q: q["spec"]["fairSharing"].update(weight="heavy"), "'heavy'"),
])
def test_the_schema_check_catches_a_broken_cluster_queue(breakage, words):
    # The check above is worth something only if it refuses what Kueue's API refuses.
    queue = one(render("standard-vllm"), "ClusterQueue", "acme")
    breakage(queue)
    assert any(words in error for error in schema_errors(queue)), schema_errors(queue)
