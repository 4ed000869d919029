"""A tenant's service Ready on a kubesim whose pods the host reaches (`--pod-network loopback`), its
upstreams learnt by the telemetry cycle, an inference key and a snapshot; and a gateway process serving it.
Shared by the gateway's end-to-end tests and the portal's playground, which calls the gateway."""

from __future__ import annotations

import subprocess
import sys

from apps.gateway.models import Upstream
from apps.gateway.snapshot import write_snapshot
from tests.database import database_url_of_test_db as database_url
from tests.factories import ClusterFactory, InferenceServiceFactory, RuntimeFactory
from tests.gateway.conftest import issue, status_of
from tests.polling import wait_for
from tests.ports import free_port
from tests.telemetry.conftest import reconcile_until_ready
from workers.telemetry import scrape_all


def serve_on_kubesim(make_cluster, tenant, tmp_path, name: str = "chat", routing_policy: str = "round_robin") -> dict:
    """A service of two vLLM replicas Ready on kubesim, its upstreams scraped (its two engines; its router
    when the policy needs one), a key, a snapshot."""
    sim = make_cluster(nodes="h100-sxm-80gb:1x8", seed=5, pod_network="loopback").server
    cluster = ClusterFactory(name="sim", api_url=sim.url, insecure_simulator=True)
    service = InferenceServiceFactory(tenant=tenant, name=name, cluster=cluster, runtime=RuntimeFactory(),
                                      routing_policy=routing_policy,
                                      pools=[{"role": "engine", "replicas": 2, "gpu_type": "h100-sxm-80gb"}])
    reconcile_until_ready(service)

    def scraped() -> int:
        scrape_all()  # the telemetry cycle, as the beat runs it every few seconds
        return len(Upstream.objects.get(service=service).endpoints)

    wait_for(lambda: scraped() == (2 if routing_policy == "round_robin" else 1), message="the upstreams")
    key_row, key = issue(tenant, "app")
    path = tmp_path / "snapshot.json"
    write_snapshot(path)
    return {"service": service, "served_model": service.model.name, "key": key, "key_id": key_row.pk,
            "snapshot": path, "endpoints": Upstream.objects.get(service=service).endpoints}


def start_gateway(served: dict, *extra: str):
    """(process, base URL) of a gateway on a free port, metering into the test database."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", str(port),
                             "--snapshot", str(served["snapshot"]), "--database-url", database_url(),
                             "--usage-flush-seconds", "0.2", *extra])
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: status_of(f"{base}/readyz") == 200, timeout=20)
    return proc, base
