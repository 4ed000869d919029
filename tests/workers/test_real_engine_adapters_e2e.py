"""The issue's "done when", against the real vLLM: the demo's real-engine service (seed_demo's acme/tiny-real, the
generated tiny Llama with a local adapter) is created through the REST API, reconciled by a real Celery worker onto
a kubesim cpu-real node, whose kubelet runs the real vLLM (CPU build); a second adapter added through the API loads
on the running engine, and answers through a gateway process, with the pod neither replaced nor restarted."""

from __future__ import annotations

import json

import pytest
from kubernetes import client as k8s
from rest_framework.test import APIClient

from apps.catalog.models import Adapter
from apps.gateway.models import Upstream
from apps.gateway.snapshot import write_snapshot
from apps.serving.management.commands.seed_demo import SERVICES, TINY_ADAPTERS, TINY_MODEL
from apps.serving.models import InferenceService
from enginevocab import vllm
from tests.conftest import REAL_ENGINE_GROUP
from tests.factories import ClusterFactory, ModelFactory, RuntimeFactory, TenantFactory, UserFactory
from tests.gateway.conftest import issue, post
from tests.gateway.served import start_gateway
from tests.workers.conftest import kubesim_process
from tests.workers.test_reconcile_e2e import wait_for
from workers.telemetry import scrape_all

# The session's lane of real engines (tests/conftest.py): one xdist worker runs them, so with the session engine
# this test's makes two at most.
pytestmark = [pytest.mark.integration, pytest.mark.real_engine, pytest.mark.xdist_group(REAL_ENGINE_GROUP)]
LABEL = "controlplane.io/service-uid"
READY_SECONDS = 240  # the real engine starts in 30-110 s on the two shared cores
SQL, CHAT = (name for name, _, _ in TINY_ADAPTERS)


@pytest.fixture
def real_stack(workers, tiny_models):
    for url in kubesim_process("cpu-real:1,cpu:1", "--models-dir", str(tiny_models)):
        name, uri, facts = TINY_MODEL
        model = ModelFactory(name=name, source_uri=uri, **facts)
        adapters = {a: Adapter.objects.create(name=a, base_model=model, source_uri=u, rank=r)
                    for a, u, r in TINY_ADAPTERS}
        api = APIClient()
        api.force_authenticate(UserFactory(username="root", is_staff=True, is_superuser=True))
        cfg = k8s.Configuration()
        cfg.host = url
        stack = {"api": api, "tenant": TenantFactory(slug="acme", gpu_quota=16), "model": model,
                 "adapters": adapters, "runtime": RuntimeFactory(name="vllm", tag=vllm.TAG),
                 "cluster": ClusterFactory(name="sim", api_url=url, insecure_simulator=True),
                 "core": k8s.CoreV1Api(k8s.ApiClient(cfg)), "workers": workers}
        yield stack
        _delete_services(stack)  # the engine stops with its pod, before kubesim does


def _delete_services(stack) -> None:
    for pk in InferenceService.objects.values_list("pk", flat=True):
        stack["api"].delete(f"/api/v1/services/{pk}/")
    wait_for(lambda: not stack["core"].list_namespaced_pod("tenant-acme").items, timeout=60, what="the pods gone")


def _demo_body(stack, adapters: list[int]) -> dict:
    """seed_demo's acme/tiny-real, as the API takes it."""
    _, name, _, _, mode, engine, routing, autoscaling, [pool] = next(s for s in SERVICES if s[1] == "tiny-real")
    return {"tenant": "acme", "name": name, "cluster": "sim", "model": stack["model"].pk,
            "runtime": stack["runtime"].pk, "deployment_mode": mode, "engine_settings": engine,
            "routing_policy": routing, "autoscaling": autoscaling, "adapters": adapters,
            "pools": [{"role": pool.role, "replicas": pool.replicas, "min_replicas": pool.min_replicas,
                       "max_replicas": pool.max_replicas, "gpus_per_replica": pool.gpus_per_replica,
                       "gpu_type": pool.gpu_type, "nodes_per_replica": 1}]}


def _ready_pods(stack, uid):
    pods = stack["core"].list_namespaced_pod("tenant-acme", label_selector=f"{LABEL}={uid}").items
    return [p for p in pods if p.metadata.labels.get("app.kubernetes.io/component") == "engine"
            and p.metadata.deletion_timestamp is None
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]


def _held(stack, pod) -> list[str]:
    response = stack["core"].connect_get_namespaced_pod_proxy_with_path(
        f"{pod.metadata.name}:8000", "tenant-acme", "v1/models", _preload_content=False)
    return sorted(card["id"] for card in json.loads(response.data)["data"] if card.get("parent"))


@pytest.mark.timeout(480)
def test_an_adapter_added_to_the_demo_service_loads_on_the_real_engine_and_answers_through_the_gateway(
        real_stack, tmp_path):
    stack = real_stack
    stack["workers"](1)
    sql, chat = stack["adapters"][SQL], stack["adapters"][CHAT]
    response = stack["api"].post("/api/v1/services/", _demo_body(stack, [sql.pk]), format="json")
    assert response.status_code == 201, response.content
    pk, uid = response.json()["id"], response.json()["uid"]
    wait_for(lambda: InferenceService.objects.get(pk=pk).phase == "Ready" and _ready_pods(stack, uid),
             timeout=READY_SECONDS, what="the real engine Ready")
    [pod] = _ready_pods(stack, uid)
    assert pod.spec.node_name == "cpu-real-0"
    logs = stack["core"].read_namespaced_pod_log(pod.metadata.name, "tenant-acme", container="engine")
    assert "Application startup complete" in logs  # vLLM's own server, not the simulation
    wait_for(lambda: _held(stack, pod) == [SQL], what=f"{SQL} loaded at run time")

    current = stack["api"].get(f"/api/v1/services/{pk}/").json()
    response = stack["api"].patch(f"/api/v1/services/{pk}/", {"adapters": [sql.pk, chat.pk],
                                                              "version": current["version"]}, format="json")
    assert response.status_code == 200, response.content
    wait_for(lambda: _held(stack, pod) == sorted([SQL, CHAT]), what=f"{CHAT} loaded on the running engine")
    [same] = _ready_pods(stack, uid)
    assert same.metadata.uid == pod.metadata.uid
    assert [c.restart_count for c in same.status.container_statuses] == [0]

    wait_for(lambda: scrape_all() is not None and Upstream.objects.filter(service_id=pk).exclude(endpoints=[]).exists(),
             what="the upstreams learnt")
    _, key = issue(stack["tenant"], "app")
    write_snapshot(tmp_path / "snapshot.json")
    proc, base = start_gateway({"snapshot": tmp_path / "snapshot.json"})
    try:
        body = {"model": CHAT, "max_tokens": 4, "messages": [{"role": "user", "content": "kubesim"}],
                "ignore_eos": True}
        status, _, answer = post(base, key, json.dumps(body).encode())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert (status, answer["model"], answer["usage"]["completion_tokens"]) == (200, CHAT, 4), answer
    assert answer["system_fingerprint"].startswith("vllm-0.32.0")  # the real server answered
    [after] = _ready_pods(stack, uid)
    assert (after.metadata.uid, [c.restart_count for c in after.status.container_statuses]) == (pod.metadata.uid, [0])
