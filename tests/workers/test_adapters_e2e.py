"""End to end: adding a LoRA adapter to a running vLLM service loads it on the running pod, through the REST API,
the database, a real Celery worker and kubesim's simulated vLLM over HTTP: the pod is not replaced, the engine
serves the adapter, the load is audited and a revision records the new set; a refused load is a condition."""

from __future__ import annotations

import json

import pytest

from apps.core.models import AuditEntry
from apps.gateway.models import Upstream
from apps.gateway.snapshot import write_snapshot
from apps.serving.models import Revision, ServiceObservation
from tests.factories import AdapterFactory
from tests.gateway.conftest import issue, post
from tests.gateway.served import start_gateway
from tests.workers.test_reconcile_e2e import create_service, engine_pods, service, stack, wait_for  # noqa: F401
from workers.telemetry import scrape_all

pytestmark = pytest.mark.integration


def _held(parts, pod) -> list[str]:
    response = parts["core"].connect_get_namespaced_pod_proxy_with_path(
        f"{pod.metadata.name}:8000", "tenant-acme", "v1/models", _preload_content=False)
    return sorted(card["id"] for card in json.loads(response.data)["data"] if card.get("parent"))


def _ready_pods(parts, uid):
    return [p for p in engine_pods(parts, uid) if p.metadata.deletion_timestamp is None
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]


def _condition(pk, ctype):
    return next((c for c in service(pk).conditions or [] if c["type"] == ctype), None)


def test_an_adapter_added_to_a_running_service_is_loaded_on_the_same_pod(stack, tmp_path):  # noqa: F811 - the fixture
    stack["workers"](1)
    sql = AdapterFactory(name="sql", base_model=stack["model"], source_uri="hf://acme/sql-lora")
    support = AdapterFactory(name="support", base_model=stack["model"], source_uri="hf://acme/support-lora")
    created = create_service(stack, adapters=[sql.pk])
    pk, uid = created["id"], created["uid"]
    wait_for(lambda: service(pk).phase == "Ready" and _ready_pods(stack, uid), timeout=180, what="phase Ready")
    [pod] = _ready_pods(stack, uid)
    args = next(c for c in pod.spec.containers if c.name == "engine").args
    assert "--enable-lora" in args and "--lora-modules" not in args  # the set is loaded at run time
    wait_for(lambda: _held(stack, pod) == ["sql"], what="sql loaded at run time")
    revisions = Revision.objects.filter(service_id=pk).count()

    current = stack["api"].get(f"/api/v1/services/{pk}/").json()
    response = stack["api"].patch(f"/api/v1/services/{pk}/", {"adapters": [sql.pk, support.pk],
                                                              "version": current["version"]}, format="json")
    assert response.status_code == 200, response.content
    wait_for(lambda: _held(stack, pod) == ["sql", "support"], what="support loaded on the running pod")
    [same] = _ready_pods(stack, uid)
    assert (same.metadata.uid, same.metadata.name) == (pod.metadata.uid, pod.metadata.name)
    assert [c.restart_count for c in same.status.container_statuses] == [0]
    latest = Revision.objects.filter(service_id=pk).order_by("-number").first()
    assert Revision.objects.filter(service_id=pk).count() == revisions + 1
    assert sorted(latest.spec["adapters"]) == sorted([sql.pk, support.pk])
    wait_for(lambda: (_condition(pk, "AdaptersLoaded") or {}).get("status") == "True", what="AdaptersLoaded")
    wait_for(lambda: ServiceObservation.objects.get(service_id=pk).adapters == {
        pod.metadata.name: {"held": ["sql", "support"]}}, what="the pod's adapters observed for the page")
    entry = AuditEntry.objects.filter(object_id=str(pk), via="system", actor_repr="reconciler").order_by("id").last()
    assert entry.after == {"adapters_loaded": {pod.metadata.name: ["sql", "support"]}}
    assert entry.before == {"adapters_loaded": {pod.metadata.name: ["sql"]}}

    # A completion for the new adapter answers through a gateway process, which knows the pod holds it.
    wait_for(lambda: scrape_all() is not None and Upstream.objects.filter(service_id=pk).exclude(endpoints=[]).exists(),
             what="the upstreams learnt")
    _, key = issue(stack["tenant"], "app")
    snapshot = write_snapshot(tmp_path / "snapshot.json")
    [entry] = next(s for s in snapshot["services"] if s["id"] == pk)["endpoints"]
    assert (entry["pod"], entry["adapters"]) == (pod.metadata.name, ["sql", "support"])
    proc, base = start_gateway({"snapshot": tmp_path / "snapshot.json"})
    try:
        body = {"model": "support", "max_tokens": 4, "messages": [{"role": "user", "content": "hello"}]}
        status, _, answer = post(base, key, json.dumps(body).encode())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert (status, answer["model"]) == (200, "support"), answer

    # Removing it unloads it, still on the same pod.
    current = stack["api"].get(f"/api/v1/services/{pk}/").json()
    response = stack["api"].patch(f"/api/v1/services/{pk}/", {"adapters": [sql.pk], "version": current["version"]},
                                  format="json")
    assert response.status_code == 200, response.content
    wait_for(lambda: _held(stack, pod) == ["sql"], what="support unloaded")
    assert [p.metadata.uid for p in _ready_pods(stack, uid)] == [pod.metadata.uid]
