"""End to end on a cluster without Kueue: the REST API → a real Celery worker → kubesim. A tenant's idle quota is
lent to another tenant's best-effort service, then reclaimed when the lender's production service arrives: the
borrower's Deployment is scaled down to what stays admitted, and the API says by whom and why."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s
from rest_framework.test import APIClient

from apps.core.models import AuditEntry
from apps.tenancy.models import TenantQueue
from tests.factories import ClusterFactory, ModelFactory, RuntimeFactory, TenantFactory, UserFactory
from tests.polling import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def west(kubesim_url, workers, classes):
    """acme and globex with 2 H100 each on the kubesim cluster (its one node has 8), lending what they do not use."""
    cluster = ClusterFactory(name="sim", api_url=kubesim_url, insecure_simulator=True)
    for slug in ("acme", "globex"):
        TenantQueue.objects.create(tenant=TenantFactory(slug=slug, gpu_quota=0), cluster=cluster,
                                   nominal={"h100-sxm-80gb": 2})
    api = APIClient()
    api.force_authenticate(UserFactory(username="root", is_staff=True, is_superuser=True))
    cfg = k8s.Configuration()
    cfg.host = kubesim_url
    workers(1)
    return {"api": api, "apps": k8s.AppsV1Api(k8s.ApiClient(cfg)), "model": ModelFactory(name="llama-3-1-8b"),
            "runtime": RuntimeFactory(name="vllm", tag="v0.33.0")}


def create(west, tenant: str, name: str, klass: str, replicas: int) -> dict:
    body = {"tenant": tenant, "name": name, "cluster": "sim", "model": west["model"].pk,
            "runtime": west["runtime"].pk, "engine_settings": {"max_model_len": 8192}, "priority_class": klass,
            "pools": [{"role": "engine", "replicas": replicas, "min_replicas": 1, "max_replicas": 4}]}
    response = west["api"].post("/api/v1/services/", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def admission(west, service: dict) -> dict:
    return west["api"].get(f"/api/v1/services/{service['id']}/").json()["admission"]


def deployment_replicas(west, tenant: str, name: str) -> int | None:
    try:
        return west["apps"].read_namespaced_deployment(name, f"tenant-{tenant}").spec.replicas
    except k8s.ApiException:
        return None


def test_lent_quota_is_reclaimed_from_the_borrowers_deployment(west):
    batch = create(west, "acme", "batch", "best-effort", replicas=4)
    wait_for(lambda: deployment_replicas(west, "acme", "batch") == 4, timeout=120, message="batch at 4 replicas")
    assert admission(west, batch) == {"state": "admitted",
                                      "reason": "Admitted on borrowed quota (2 H100 80GB from globex)"}

    prod = create(west, "globex", "prod", "production", replicas=2)
    wait_for(lambda: deployment_replicas(west, "globex", "prod") == 2, timeout=120, message="prod at 2 replicas")
    # globex's production service takes its 2 H100 back: acme's batch keeps its own 2.
    wait_for(lambda: deployment_replicas(west, "acme", "batch") == 2, timeout=120, message="batch down to 2")
    state = admission(west, batch)
    assert state["state"] == "preempted"
    assert state["reason"].startswith("Preempted by globex/prod/engine-")
    assert "(production 1000 > best-effort 0) to reclaim globex's nominal quota at " in state["reason"]
    assert admission(west, prod) == {"state": "admitted", "reason": "Admitted"}
    assert AuditEntry.objects.filter(object_id=str(batch["id"]), actor_repr="admission:controlplane").count() == 2


def test_on_a_cluster_with_kueue_the_queue_is_rendered_and_admission_read_back(west):
    from apps.clusters.models import Cluster

    Cluster.objects.filter(name="sim").update(kueue_installed=True)
    batch = create(west, "acme", "batch", "best-effort", replicas=3)
    # kubesim's Kueue controller admits the pods' Workloads from the rendered ClusterQueue, LocalQueue and flavors:
    # acme's 2 H100 and 1 borrowed from globex.
    wait_for(lambda: admission(west, batch)["state"] == "admitted", timeout=120, message="batch admitted by Kueue")
    assert admission(west, batch)["reason"] == "Admitted on borrowed quota (1 H100 80GB from globex)"
    queue = k8s.CustomObjectsApi(west["apps"].api_client).get_cluster_custom_object(
        "kueue.x-k8s.io", "v1beta1", "clusterqueues", "acme")
    assert queue["spec"]["cohort"] == "sim"
