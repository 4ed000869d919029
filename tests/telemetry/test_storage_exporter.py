"""The control plane's own `/metrics`: reconcile outcomes and durations, queue lag and scrape cycles,
computed from database rows (so web, worker and beat processes all count), for staff or a bearer token."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from apps.serving.models import ReconcileRun
from apps.telemetry.models import QueueHeartbeat, ScrapeCycle
from tests.factories import PASSWORD, ClusterFactory, InferenceServiceFactory


def samples(text: str) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture
def staff_client(client, staff):
    assert client.login(username=staff.username, password=PASSWORD)
    return client


def test_reconcile_outcomes_and_durations_come_from_recorded_passes(staff_client, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a)
    for ms, result in ((30, "converged"), (200, "converged"), (4000, "failed")):
        ReconcileRun.objects.create(service=service, started_at=timezone.now(), generation=1, result=result,
                                    duration_ms=ms)

    got = samples(staff_client.get("/metrics").content.decode())

    assert got[("controlplane_reconcile_runs_total", (("result", "converged"),))] == 2
    assert got[("controlplane_reconcile_runs_total", (("result", "failed"),))] == 1
    bucket = "controlplane_reconcile_duration_seconds_bucket"
    assert got[(bucket, (("le", "0.05"),))] == 1
    assert got[(bucket, (("le", "0.25"),))] == 2
    assert got[(bucket, (("le", "2.5"),))] == 2
    assert got[(bucket, (("le", "5.0"),))] == 3
    assert got[(bucket, (("le", "+Inf"),))] == 3
    assert got[("controlplane_reconcile_duration_seconds_sum", ())] == pytest.approx(4.23)
    assert got[("controlplane_services", (("phase", "Pending"),))] == 1


def test_queue_lag_is_the_last_heartbeats_wait_or_the_age_of_one_still_waiting(staff_client):
    now = timezone.now()
    QueueHeartbeat.objects.create(queue="reconcile", sent_at=now - timedelta(seconds=30),
                                  received_at=now - timedelta(seconds=29.5), lag_s=0.5)
    QueueHeartbeat.objects.create(queue="telemetry", sent_at=now - timedelta(seconds=40))

    got = samples(staff_client.get("/metrics").content.decode())

    assert got[("controlplane_task_queue_lag_seconds", (("queue", "reconcile"),))] == 0.5
    assert 40 <= got[("controlplane_task_queue_lag_seconds", (("queue", "telemetry"),))] < 45


def test_scrape_counters_continue_from_the_newest_cycle(staff_client):
    cluster = ClusterFactory(name="east")
    now = timezone.now()
    ScrapeCycle.objects.create(cluster=cluster, started_at=now - timedelta(seconds=10), duration_s=0.4, pods=10,
                               errors=0, total_cycles=6, total_pods=60, total_errors=2)
    ScrapeCycle.objects.create(cluster=cluster, started_at=now - timedelta(seconds=5), duration_s=0.25, pods=10,
                               errors=1, lag_p95_s=0.05, total_cycles=7, total_pods=70, total_errors=3)

    got = samples(staff_client.get("/metrics").content.decode())

    east = (("cluster", "east"),)
    assert got[("controlplane_telemetry_scrape_cycles_total", east)] == 7
    assert got[("controlplane_telemetry_pod_scrapes_total", east)] == 70
    assert got[("controlplane_telemetry_scrape_errors_total", east)] == 3
    assert got[("controlplane_telemetry_scrape_duration_seconds", east)] == 0.25
    assert got[("controlplane_telemetry_scrape_lag_p95_seconds", east)] == 0.05
    assert got[("controlplane_telemetry_scrape_duration_max_seconds", ())] == 0.4


def test_metrics_need_a_staff_session_or_the_bearer_token(client, settings, owner_a):
    settings.METRICS_TOKEN = "s3cret-token"

    assert client.get("/metrics").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token").status_code == 200
    client.login(username=owner_a.username, password=PASSWORD)
    assert client.get("/metrics").status_code == 403  # a tenant owner is not platform staff


def test_without_a_token_configured_no_bearer_gets_in(client, settings):
    settings.METRICS_TOKEN = ""

    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 403
