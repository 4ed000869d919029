"""`hpa` keeps rendering a HorizontalPodAutoscaler, and the reconciler reads its live status back from the
cluster (kubesim's HPA controller) for the service page: current and desired replicas, conditions."""

from __future__ import annotations

from apps.serving.models import ServiceObservation
from tests.polling import wait_for
from tests.telemetry.conftest import deploy, sim, sim_cluster  # noqa: F401 (fixtures)
from workers.reconcile import reconcile


def test_the_hpas_live_status_is_read_back_into_the_observation(deploy, tenant_a):  # noqa: F811
    service = deploy(tenant_a, "hpa-chat", autoscaling={"autoscaler": "hpa", "targets": {
        "waiting_requests_per_replica": 4}}, pools=[{"role": "engine", "replicas": 1, "min_replicas": 1,
                                                       "max_replicas": 3, "gpu_type": "h100-sxm-80gb"}])

    def status():
        reconcile(service.pk)
        rows = ServiceObservation.objects.get(service=service).autoscalers
        return rows if rows and rows[0]["conditions"] else None

    [row] = wait_for(status, timeout=60, interval=0.5, message="HPA status read back")
    assert (row["kind"], row["name"], row["target"], row["min"], row["max"]) == (
        "HorizontalPodAutoscaler", "hpa-chat", "hpa-chat", 1, 3)
    assert row["current"] is not None and row["desired"] is not None
    assert {c["type"] for c in row["conditions"]} >= {"AbleToScale"}
