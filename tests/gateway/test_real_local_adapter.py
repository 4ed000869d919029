"""A catalog adapter with a `local://` source, added to a service on the running real vLLM (kubesim cpu-real node):
the path the renderer gives it in the pod loads through the pod proxy (the kubelet maps it to the node's models
folder), without a restart of the pod, and a completion for it answers through the gateway."""

from __future__ import annotations

import pytest
from django.utils import timezone

from apps.catalog.models import Adapter
from apps.gateway.models import Upstream
from apps.gateway.snapshot import write_snapshot
from apps.serving.rendering.loras import run_time_adapters
from apps.serving.rendering.spec import spec_from_service
from tests.factories import InferenceServiceFactory, ModelFactory
from tests.gateway.conftest import client, issue
from tests.realengine import ADAPTERS, MODEL, NAMESPACE, PORT
from workers.engineadapters import sync_adapters
from workers.enginepods import EnginePod


@pytest.fixture
def served(real_engine, transactional_db, tenant_a, tmp_path):
    """A vLLM service of the tiny model with one local adapter, its upstream the real engine's pod (the
    `gateway` fixture of tests/gateway/conftest.py serves it)."""
    model = ModelFactory(tenant=tenant_a, name=MODEL, source_uri="local://tiny")
    service = InferenceServiceFactory(tenant=tenant_a, name="real", model=model)
    service.adapters.add(Adapter.objects.create(tenant=tenant_a, name=ADAPTERS[0], base_model=model, rank=8,
                                                source_uri=f"local://adapters/{ADAPTERS[0]}"))
    pod = real_engine.cluster.core.read_namespaced_pod(real_engine.pod, NAMESPACE)
    Upstream.objects.create(service=service, ready_engines=1, seen_at=timezone.now(),
                            endpoints=[{"pod": real_engine.pod, "address": f"{pod.status.pod_ip}:{PORT}"}])
    _, key = issue(tenant_a, "app")
    path = tmp_path / "snapshot.json"
    write_snapshot(path)
    return {"key": key, "snapshot": path, "service": service}


def test_a_local_adapter_added_to_the_service_loads_without_a_restart_and_answers_through_the_gateway(
        real_engine, served, gateway):
    name = ADAPTERS[0]
    desired = run_time_adapters(spec_from_service(served["service"]))
    assert desired == {name: f"/models/local/adapters/{name}"}  # its path in the pod, not on the node
    core = real_engine.cluster.core
    pod = EnginePod(0, NAMESPACE, real_engine.pod, "engine", "", PORT, True)
    before = core.read_namespaced_pod(real_engine.pod, NAMESPACE).status.container_statuses[0]
    try:
        result = sync_adapters(core, pod, "vllm", desired)
        assert (result.loaded, result.refused, result.held) == ([name], {}, [name])
        answer = client(gateway, served["key"]).completions.create(
            model=name, prompt="kubesim", max_tokens=3, extra_body={"ignore_eos": True})
        assert answer.model == name and answer.usage.completion_tokens == 3
    finally:
        assert sync_adapters(core, pod, "vllm", {}).held == []
    after = core.read_namespaced_pod(real_engine.pod, NAMESPACE).status.container_statuses[0]
    assert (after.restart_count, after.container_id) == (before.restart_count, before.container_id)
