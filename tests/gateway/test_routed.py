"""A routed service through the gateway: requests go to its router pod, and with `--backend-pod-header` the
usage rows name the engine pod the router chose (kubesim's routers say it in x-kubesim-backend), so what was
metered can be told apart by pod, as a canary's analysis needs."""

from __future__ import annotations

from apps.gateway.models import UsageRow
from apps.serving.models import ServiceObservation
from tests.gateway.conftest import client
from tests.gateway.served import serve_on_kubesim, start_gateway
from tests.polling import wait_for

PROMPT = "Say something about the sea."


def pods_of(service, role: str) -> set[str]:
    observed = ServiceObservation.objects.get(service=service).pods
    return {p["name"] for p in observed if p.get("role") == role and p.get("ready")}


def test_rows_name_the_engine_the_router_chose_when_the_gateway_is_told_the_header(make_cluster, transactional_db,
                                                                                   tenant_a, tmp_path):
    served = serve_on_kubesim(make_cluster, tenant_a, tmp_path, routing_policy="session")
    (router,) = served["endpoints"]
    engines = pods_of(served["service"], "engine")
    assert len(engines) == 2 and router["pod"] not in engines
    for extra, expected in (((), {router["pod"]}), (("--backend-pod-header", "x-kubesim-backend"), engines)):
        UsageRow.objects.all().delete()
        proc, base = start_gateway(served, *extra)
        try:
            api = client(base, served["key"])
            for i in range(6):  # six sessions: the router spreads them over both engines
                api.completions.create(model="chat", prompt=PROMPT, max_tokens=2, user=f"session-{i}")
            assert list(api.completions.create(model="chat", prompt=PROMPT, max_tokens=2, stream=True))
            rows = wait_for(lambda: list(UsageRow.objects.all()) if UsageRow.objects.count() == 7 else None,
                            message="seven usage rows")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        assert {r.pod for r in rows} <= expected and all(r.status == 200 for r in rows)
        if extra:
            assert {r.pod for r in rows} == engines  # both engines served, each named
