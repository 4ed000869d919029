"""Sleep and wake end to end on kubesim: a serverless vLLM service whose policy says sleep renders sleep mode, the
worker puts its engine to sleep through the pod proxy, the snapshot names the engine, and a request through a
gateway process wakes it and is answered (through the service's router)."""

from __future__ import annotations

import json

from apps.gateway.models import Upstream
from apps.gateway.snapshot import write_snapshot
from apps.serving.names import tenant_namespace
from tests.factories import ClusterFactory, InferenceServiceFactory, RuntimeFactory
from tests.gateway.conftest import issue, post
from tests.gateway.served import start_gateway
from tests.polling import wait_for
from tests.telemetry.conftest import reconcile_until_ready
from workers.sleep import sleep_pool
from workers.telemetry import scrape_all

POLICY = {"autoscaler": "builtin", "targets": {"waiting_requests_per_replica": 4},
          "scale_to_zero_after_seconds": 120, "when_idle": "sleep"}


def _is_sleeping(core, namespace: str, pod: str) -> bool:
    response = core.connect_get_namespaced_pod_proxy_with_path(f"{pod}:8000", namespace, "is_sleeping",
                                                               _preload_content=False)
    return json.loads(response.data)["is_sleeping"]


def test_a_request_through_the_gateway_wakes_the_sleeping_engine(make_cluster, transactional_db, tenant_a, tmp_path):
    handle = make_cluster(nodes="h100-sxm-80gb:1x8", seed=5, pod_network="loopback")
    cluster = ClusterFactory(name="sim", api_url=handle.server.url, insecure_simulator=True)
    service = InferenceServiceFactory(
        tenant=tenant_a, name="naps", cluster=cluster, runtime=RuntimeFactory(), deployment_mode="serverless",
        autoscaling=POLICY, pools=[{"role": "engine", "replicas": 1, "min_replicas": 0, "max_replicas": 2,
                                    "gpu_type": "h100-sxm-80gb"}])
    reconcile_until_ready(service)

    def scraped():
        scrape_all()
        upstream = Upstream.objects.filter(service=service).first()
        return upstream if upstream and upstream.engines and upstream.endpoints else None

    engine = wait_for(scraped, timeout=60, message="the upstreams").engines[0]["pod"]
    namespace = tenant_namespace(tenant_a.slug)
    assert sleep_pool(service.pk, "engine", 1) == {engine: "sleeping"}
    assert _is_sleeping(handle.core, namespace, engine) is True
    upstream = Upstream.objects.get(service=service)
    assert (upstream.sleep_level, upstream.slept_at is not None) == (1, True)

    _, key = issue(tenant_a, "app")
    served = {"snapshot": tmp_path / "snapshot.json"}
    write_snapshot(served["snapshot"])
    proc, base = start_gateway(served)
    try:
        body = json.dumps({"model": service.model.name, "max_tokens": 4,
                           "messages": [{"role": "user", "content": "wake up"}]}).encode()
        status, _, answer = post(base, key, body)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert status == 200, answer
    assert answer["usage"]["completion_tokens"] == 4
    assert _is_sleeping(handle.core, namespace, engine) is False
