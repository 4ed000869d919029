"""The service list and service page: status from the reconciler's observations, figures from the
stored series, htmx partials, and tenant isolation (another tenant's service is a 404 everywhere)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.serving.models import ReconcileRun, ServiceObservation
from apps.telemetry.models import PodStat
from tests.factories import ClusterFactory, InferenceServiceFactory
from tests.web.conftest import point


@pytest.fixture
def service_a(tenant_a):
    cluster = ClusterFactory(name="sim")
    cluster.gpu_nodes.create(name="gpu-l4-0", gpu_product="NVIDIA-L4", gpu_count=1, allocatable=1, allocated=1)
    service = InferenceServiceFactory(
        tenant=tenant_a, name="chat", cluster=cluster, phase="Failed",
        conditions=[
            {"type": "Schedulable", "status": "False", "reason": "Unschedulable",
             "message": "needs 2 × NVIDIA-L4 per replica; 0 of 4 L4 nodes have 2 free", "lastTransitionTime": ""},
            {"type": "Healthy", "status": "True", "reason": "Running", "message": "", "lastTransitionTime": ""},
        ],
    )
    ServiceObservation.objects.create(
        service=service,
        pools=[{"role": "engine", "desired": 2, "ready": 1, "updated": 1}],
        pods=[{"name": "chat-abc-1", "role": "engine", "phase": "Running", "ready": True, "node": "gpu-l4-0",
               "reason": "", "message": "", "restarts": 0, "gpus": 1},
              {"name": "chat-abc-2", "role": "engine", "phase": "Pending", "ready": False, "node": "",
               "reason": "Unschedulable", "message": "0/3 nodes are available", "restarts": 0, "gpus": 1}],
        events=[{"type": "Warning", "reason": "FailedScheduling", "message": "0/3 nodes are available: insufficient",
                 "object": "Pod/chat-abc-2", "time": "", "count": 3},
                # Another service's workload in the same namespace: not this page's business.
                {"type": "Normal", "reason": "ScalingReplicaSet", "message": "Scaled up chatty-router",
                 "object": "Deployment/chatty-router", "time": "", "count": 1}],
        observed_at=timezone.now(),
    )
    ReconcileRun.objects.create(service=service, started_at=timezone.now(), generation=1, result="failed",
                                applied=5, duration_ms=42, message="Unschedulable")
    PodStat.objects.create(service=service, pod="chat-abc-1", role="engine", node="gpu-l4-0", scraped_at=timezone.now(),
                           figures={"ttft_p95_s": 0.1234, "kv_cache_usage": 0.375, "running": 3, "waiting": 2})
    return service


@pytest.fixture
def service_b(tenant_b):
    return InferenceServiceFactory(tenant=tenant_b, name="secret-bravo")


def test_viewer_sees_status_pods_events_and_history_of_their_service(login, viewer_a, service_a):
    page = login(viewer_a).get(reverse("web:service", args=[service_a.tenant.slug, service_a.name]))

    assert page.status_code == 200
    html = page.content.decode()
    # The reconciler's advice, the pod's node and GPU, the scraped figures, the event and the run.
    assert "needs 2 × NVIDIA-L4 per replica; 0 of 4 L4 nodes have 2 free" in html
    assert "gpu-l4-0" in html and "1 × NVIDIA-L4" in html
    assert "123 ms" in html and "37.5 %" in html
    assert "FailedScheduling" in html and "0/3 nodes are available" in html
    assert "chatty-router" not in html
    assert "result-failed" in html and "42 ms" in html
    assert 'id="chart-ttft"' in html and "vendor/plotly.min.js" in html


def test_htmx_polling_gets_only_the_status_partial(login, viewer_a, service_a):
    partial = login(viewer_a).get(reverse("web:service", args=[service_a.tenant.slug, service_a.name]), HTTP_HX_REQUEST="true")

    html = partial.content.decode()
    assert partial.status_code == 200
    assert "<html" not in html and "chart-ttft" not in html
    assert "chat-abc-2" in html and "Unschedulable" in html
    # Phase and advice at the top of the page come along as an out-of-band swap.
    summary = html[html.index('id="service-summary"'):]
    assert 'hx-swap-oob="true"' in summary[:60] and "Failed" in summary and "0 of 4 L4 nodes have 2 free" in summary


def test_viewer_cannot_open_another_tenants_service_page_partial_or_series(login, viewer_a, service_b):
    client = login(viewer_a)
    point(service_b, 5, ttft_p95=0.5)

    assert client.get(reverse("web:service", args=[service_b.tenant.slug, service_b.name])).status_code == 404
    assert client.get(reverse("web:service", args=[service_b.tenant.slug, service_b.name]), HTTP_HX_REQUEST="true").status_code == 404
    assert client.get(reverse("web:service-series", args=[service_b.tenant.slug, service_b.name])).status_code == 404
    listing = client.get(reverse("web:services")).content.decode()
    assert "secret-bravo" not in listing


def test_staff_see_every_tenants_service(login, staff, service_a, service_b):
    listing = login(staff).get(reverse("web:services")).content.decode()

    assert reverse("web:service", args=[service_a.tenant.slug, service_a.name]) in listing
    assert reverse("web:service", args=[service_b.tenant.slug, service_b.name]) in listing


def test_anonymous_visitors_are_sent_to_log_in(client, service_a):
    response = client.get(reverse("web:service", args=[service_a.tenant.slug, service_a.name]))

    assert response.status_code == 302 and reverse("web:login") in response["Location"]


def test_series_json_returns_the_rows_in_the_range_oldest_first(login, viewer_a, service_a):
    point(service_a, 1000, ttft_p95=9.0)  # outside the 15-minute default
    point(service_a, 20, ttft_p95=0.2, kv_usage=0.5, ready_replicas=2)
    point(service_a, 10, ttft_p95=0.3, kv_usage=0.25, ready_replicas=2)
    point(service_a, 10, role="engine", ttft_p95=7.0)  # a pool row is not the service's

    data = login(viewer_a).get(reverse("web:service-series", args=[service_a.tenant.slug, service_a.name])).json()

    assert data["resolution"] == "raw" and data["step"] == 5
    assert data["ttft_p95"] == pytest.approx([0.2, 0.3])
    assert data["kv_usage"] == [0.5, 0.25] and data["ready_replicas"] == [2, 2]
    assert len(data["time"]) == 2 and data["time"][0] < data["time"][1]


def test_series_json_with_a_coarser_step_merges_rows_by_the_column_rules(login, viewer_a, service_a):
    # Two rows in one 10-minute bucket: latency keeps the worst, gauges and rates are averaged.
    now = timezone.now()
    bucket_start = now.replace(minute=(now.minute // 10) * 10, second=0, microsecond=0) - timedelta(minutes=20)
    for offset, ttft, kv, waiting, preemptions in ((60, 0.2, 0.5, 1, 2), (120, 0.6, 0.25, 4, 3)):
        row = point(service_a, 0, ttft_p95=ttft, kv_usage=kv, waiting=waiting, preemptions=preemptions)
        row.time = bucket_start + timedelta(seconds=offset)
        row.save()

    data = login(viewer_a).get(reverse("web:service-series", args=[service_a.tenant.slug, service_a.name]),
                               {"since": "1h", "step": "10m"}).json()

    assert data["step"] == 600
    assert data["time"] == [bucket_start.isoformat().replace("+00:00", "Z")]
    assert data["ttft_p95"] == pytest.approx([0.6])
    assert data["kv_usage"] == pytest.approx([0.375])
    assert data["waiting"] == pytest.approx([2.5])
    assert data["preemptions"] == pytest.approx([5.0])


def test_series_json_explains_a_bad_since(login, viewer_a, service_a):
    response = login(viewer_a).get(reverse("web:service-series", args=[service_a.tenant.slug, service_a.name]), {"since": "yesterday"})

    assert response.status_code == 400
    assert "ISO 8601" in response.json()["detail"]


def test_fleet_overview_names_the_slowest_fullest_and_busiest_services(login, owner_a, tenant_a, service_a):
    fast = InferenceServiceFactory(tenant=tenant_a, name="fast")
    point(service_a, 5, ttft_p95=0.9, kv_usage=0.2, waiting=1, running=2)
    point(fast, 5, ttft_p95=0.05, kv_usage=0.8, waiting=7, running=1)
    stale = InferenceServiceFactory(tenant=tenant_a, name="stale")
    point(stale, 3600, ttft_p95=30.0, kv_usage=1.0, waiting=99)  # an hour old: not "now"

    html = login(owner_a).get(reverse("web:home")).content.decode()
    figures = html[html.index('id="fleet-figures"'):html.index("<h2>Services")]

    worst = figures[figures.index("Worst TTFT p95"):figures.index("Highest KV-cache usage")]
    kv = figures[figures.index("Highest KV-cache usage"):figures.index("Busiest queues")]
    queues = figures[figures.index("Busiest queues"):]
    assert worst.index("alpha/chat") < worst.index("alpha/fast") and "900 ms" in worst
    assert kv.index("alpha/fast") < kv.index("alpha/chat") and "80.0 %" in kv
    assert queues.index("alpha/fast") < queues.index("alpha/chat") and "7 waiting" in queues
    assert "stale" not in figures
    assert reverse("web:service", args=[service_a.tenant.slug, service_a.name]) in html


def test_a_quiet_interval_does_not_hide_the_last_ttft_from_the_fleet(login, owner_a, service_a):
    point(service_a, 15, ttft_p95=0.4, kv_usage=0.2, waiting=0)
    point(service_a, 5, ttft_p95=None, kv_usage=0.1, waiting=0)  # no request got its first token here

    html = login(owner_a).get(reverse("web:home")).content.decode()

    worst = html[html.index("Worst TTFT p95"):html.index("Highest KV-cache usage")]
    kv = html[html.index("Highest KV-cache usage"):html.index("Busiest queues")]
    assert "alpha/chat" in worst and "400 ms" in worst
    assert "10.0 %" in kv


def test_the_page_shows_what_the_reconciler_found_different_in_the_cluster(login, viewer_a, service_a):
    diff = ("--- cluster: Deployment tenant-alpha/chat\n+++ desired: Deployment tenant-alpha/chat\n@@ -1,2 +1,2 @@\n"
            "-        image: vllm/vllm-openai:hacked\n+        image: vllm/vllm-openai:v0.33.0\n   name: engine")
    ServiceObservation.objects.filter(service=service_a).update(drift=[
        {"object": "Deployment tenant-alpha/chat", "diff": diff, "cause": "drift", "found_at": "2026-11-29T18:00:00Z"}])

    html = login(viewer_a).get(reverse("web:service", args=[service_a.tenant.slug, service_a.name])).content.decode()

    section = html[html.index('id="drift"'):]
    assert "Deployment tenant-alpha/chat" in section and 'class="cause-drift"' in section
    assert '<span class="diff-del">-        image: vllm/vllm-openai:hacked</span>' in section
    assert '<span class="diff-add">+        image: vllm/vllm-openai:v0.33.0</span>' in section


def test_no_drift_section_when_the_cluster_matched(login, viewer_a, service_a):
    html = login(viewer_a).get(reverse("web:service", args=[service_a.tenant.slug, service_a.name])).content.decode()

    assert 'id="drift"' not in html


def test_the_fleet_figures_never_name_another_tenants_service(login, viewer_a, service_a, service_b):
    point(service_a, 5, ttft_p95=0.1, kv_usage=0.1, waiting=1)
    point(service_b, 5, ttft_p95=9.9, kv_usage=0.99, waiting=50)

    html = login(viewer_a).get(reverse("web:home")).content.decode()

    assert "secret-bravo" not in html and "9,900 ms" not in html and "99.0 %" not in html
    assert "alpha/chat" in html


def test_idle_services_are_not_listed_as_full_or_busy(login, owner_a, tenant_a, service_a):
    idle = InferenceServiceFactory(tenant=tenant_a, name="idle")
    point(service_a, 5, kv_usage=0.3, waiting=0, running=2)
    point(idle, 5, kv_usage=0.0, waiting=0, running=0)

    html = login(owner_a).get(reverse("web:home")).content.decode()

    kv = html[html.index("Highest KV-cache usage"):html.index("Busiest queues")]
    queues = html[html.index("Busiest queues"):html.index("<h2>Services")]
    assert "alpha/chat" in kv and "alpha/idle" not in kv
    assert "0 waiting · 2 running" in queues and "alpha/idle" not in queues


def test_the_service_list_and_fleet_cost_the_same_queries_for_many_services(login, owner_a, tenant_a):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = login(owner_a)

    def queries(path):
        with CaptureQueriesContext(connection) as captured:
            assert client.get(path).status_code == 200
        return len(captured)

    for i in range(2):  # one with a TTFT and one without (filled from older rows), as below
        point(InferenceServiceFactory(tenant=tenant_a, name=f"few-{i}"), 5, ttft_p95=0.1 if i else None,
              kv_usage=0.2, waiting=1)
    few = (queries(reverse("web:services")), queries(reverse("web:home")))
    for i in range(8):
        point(InferenceServiceFactory(tenant=tenant_a, name=f"many-{i}"), 5, ttft_p95=None, kv_usage=0.2, waiting=1)
    many = (queries(reverse("web:services")), queries(reverse("web:home")))

    assert many == few


def test_fleet_overview_marks_the_services_hitting_their_cpu_tier_most_first(login, owner_a, tenant_a, service_a):
    tiered = InferenceServiceFactory(tenant=tenant_a, name="tiered")
    point(service_a, 5, kv_usage=0.5, cpu_hit_rate=0.1, cpu_usage=0.2)
    point(tiered, 5, kv_usage=0.5, cpu_hit_rate=0.45, cpu_usage=0.9)
    none = InferenceServiceFactory(tenant=tenant_a, name="notier")
    point(none, 5, kv_usage=0.9)  # no CPU tier: not listed

    html = login(owner_a).get(reverse("web:home")).content.decode()
    section = html[html.index('id="cpu-tier-hits"'):html.index("<h2>Services")]

    assert section.index("alpha/tiered") < section.index("alpha/chat")
    assert "45.0 % of prompt tokens · tier 90.0 % full" in section and "10.0 % of prompt tokens" in section
    assert "notier" not in section
