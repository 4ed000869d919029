"""The reconcile step's adapter sync against kubesim's simulated vLLM, over the real Kubernetes client and the
pod proxy: a refused load is the service's AdaptersLoaded condition with the engine's message; a load is audited."""

from __future__ import annotations

import json
from dataclasses import replace

from apps.core.models import AuditEntry
from apps.rollouts.units import with_canary
from apps.serving.names import COMPONENT_LABEL, REVISION_LABEL, SERVICE_UID_LABEL
from apps.serving.rendering.spec import AdapterSpec, spec_from_service
from tests.factories import AdapterFactory, InferenceServiceFactory
from tests.kubesim.cluster_support import GPU_TOLERATION, deployment_of
from tests.polling import wait_for
from workers.adaptersync import sync_service_adapters

NAMESPACE = "default"


def _engine_pod(handle, service, name: str, runtime: bool, revision: int | None = None) -> list[dict]:
    container = {
        "name": "engine", "image": "vllm/vllm-openai:v0.32.0", "command": ["vllm", "serve"],
        "args": ["meta-llama/Llama-3.1-8B-Instruct", "--port", "8000", "--enable-lora", "--max-loras", "4"],
        "ports": [{"containerPort": 8000, "name": "http"}], "resources": {"limits": {"nvidia.com/gpu": "1"}},
        "env": [{"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"}] if runtime else [],
    }
    deployment = deployment_of(name, 1, {"containers": [container], "tolerations": [GPU_TOLERATION]})
    deployment["spec"]["template"]["metadata"]["labels"].update(
        {SERVICE_UID_LABEL: str(service.uid), COMPONENT_LABEL: "engine",
         **({REVISION_LABEL: str(revision)} if revision else {})})
    handle.apps.create_namespaced_deployment(NAMESPACE, deployment)

    def ready_pods():
        response = handle.core.list_namespaced_pod(NAMESPACE, label_selector=f"app={name}", _preload_content=False)
        pods = json.loads(response.data)["items"]
        ok = [p for p in pods if any(c["type"] == "Ready" and c["status"] == "True"
                                     for c in p["status"].get("conditions") or [])]
        return ok or None

    return wait_for(ready_pods, timeout=60, message=name)


def _service(tenant, name):
    service = InferenceServiceFactory(tenant=tenant, name=name)
    adapter = AdapterFactory(name="sql", base_model=service.model, source_uri="hf://acme/sql-lora")
    service.adapters.set([adapter])
    return service


def test_a_refused_load_is_a_false_condition_with_the_engines_message(make_cluster, tenant_a):
    handle = make_cluster(nodes="h100-sxm-80gb:1x1")
    service = _service(tenant_a, "plain")
    pods = _engine_pod(handle, service, "plain", runtime=False)  # no runtime LoRA: vLLM has no load route
    found = sync_service_adapters(handle.core, service, spec_from_service(service), pods)
    cond, name = found.condition, pods[0]["metadata"]["name"]
    assert found.held == {name: {"held": [], "refused": {"sql": "404: Not Found"}}}
    assert (cond["type"], cond["status"], cond["reason"]) == ("AdaptersLoaded", "False", "LoadRefused")
    assert cond["message"] == f"{name}: sql: 404: Not Found"  # the engine's own answer to an unknown route
    assert not AuditEntry.objects.filter(object_id=str(service.pk), actor_repr="reconciler").exists()


def test_a_load_is_audited_and_the_condition_names_what_the_pods_hold(make_cluster, tenant_a):
    handle = make_cluster(nodes="h100-sxm-80gb:1x1")
    service = _service(tenant_a, "lora")
    pods = _engine_pod(handle, service, "lora", runtime=True)
    found = sync_service_adapters(handle.core, service, spec_from_service(service), pods)
    cond = found.condition
    assert found.held == {pods[0]["metadata"]["name"]: {"held": ["sql"]}}
    assert (cond["status"], cond["reason"], cond["message"]) == ("True", "Loaded", "1 pods hold sql.")
    [entry] = AuditEntry.objects.filter(object_id=str(service.pk), actor_repr="reconciler")
    name = pods[0]["metadata"]["name"]
    assert (entry.via, entry.before, entry.after) == (
        "system", {"adapters_loaded": {name: []}}, {"adapters_loaded": {name: ["sql"]}})
    again = sync_service_adapters(handle.core, service, spec_from_service(service), pods).condition
    assert again["status"] == "True"
    assert AuditEntry.objects.filter(object_id=str(service.pk), actor_repr="reconciler").count() == 1


def test_during_a_canary_rollout_the_canary_pods_get_the_new_revisions_adapters(make_cluster, tenant_a):
    handle = make_cluster(nodes="h100-sxm-80gb:1x2")
    service = _service(tenant_a, "rolls")
    [stable] = _engine_pod(handle, service, "rolls", runtime=True)
    [canary] = _engine_pod(handle, service, "rolls-r2", runtime=True, revision=2)
    old = spec_from_service(service)
    new = replace(old, adapters=(*old.adapters, AdapterSpec("support", "hf://acme/support-lora", 16)))
    found = sync_service_adapters(handle.core, service, with_canary(old, new, 2, 10), [stable, canary])
    assert found.held == {stable["metadata"]["name"]: {"held": ["sql"]},
                          canary["metadata"]["name"]: {"held": ["sql", "support"]}}
    assert found.condition["message"] == "2 pods hold sql, support."
