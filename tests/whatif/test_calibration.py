"""Calibration: the replay of a service's actual configuration over its recorded window against what the stored
series showed there, kept per service and readable through the API."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.gateway.models import UsageRow
from apps.telemetry.models import SERVICE_ROLE, RequestMixPoint, SeriesPoint
from apps.whatif.lab import Load
from apps.whatif.models import Calibration, Run, RunStatus
from apps.whatif.runs import calibrate, execute, start_run
from capacity.traces import TraceRequest
from tests.factories import InferenceServiceFactory
from tests.telemetry.conftest import deploy, send_load, sim, sim_cluster  # noqa: F401 (fixtures)
from workers.telemetry import scrape_all

pytestmark = pytest.mark.django_db


@pytest.fixture
def service(tenant_a):
    return InferenceServiceFactory(
        tenant=tenant_a, name="chat",
        pools=[{"role": "engine", "replicas": 2, "min_replicas": 1, "max_replicas": 2, "gpu_type": "l4-24gb"}],
        engine_settings={"max_model_len": 8192})


def test_predicted_against_observed_by_hand(service, owner_a):
    start = timezone.now() - timedelta(minutes=10)
    # Rows at +0 s (opens the window), +15 s and +30 s; each later row covers the 15 s before it.
    for seconds, p95, ready in ((0, None, 2), (15, 1.0, 2), (30, 3.0, 2)):
        SeriesPoint.objects.create(service=service, role=SERVICE_ROLE, time=start + timedelta(seconds=seconds),
                                   ttft_p50=None if p95 is None else p95 / 2, ttft_p95=p95, itl_p95=0.05,
                                   ready_replicas=ready)
    for seconds, requests in ((15, 3.0), (30, 1.0)):
        RequestMixPoint.objects.create(service=service, time=start + timedelta(seconds=seconds), interval_s=15,
                                       requests=requests, prompt_buckets=[], output_buckets=[])
    run = Run.objects.create(service=service, cpu_budget_s=1, status=RunStatus.SUCCEEDED)
    load = Load("recorded", [TraceRequest(0.0, 10, 1), TraceRequest(30.0, 10, 1)], None, start)
    current = {"ttft_p50_s": 0.9, "ttft_p95_s": 1.8, "itl_p95_s": 0.05, "gpu_hours": 0.02, "gpus_per_replica": 1,
               "timeline": [{"t": 15, "replicas": 2}, {"t": 30, "replicas": 2}]}

    found = calibrate(run, service, load, current)

    # TTFT p95 observed: (1.0 x 3 + 3.0 x 1) / 4 requests = 1.5 s; predicted 1.8 s: +20 %.
    # GPU-hours observed: 2 ready replicas x 1 GPU x 30 s = 60 GPU-s = 0.016667 h; predicted 0.02: +20 %.
    assert found.observed["ttft_p95_s"] == 1.5 and found.observed["gpu_hours"] == round(60 / 3600, 4)
    assert found.errors_pct == {"ttft_p50_s": 20.0, "ttft_p95_s": 20.0, "itl_p95_s": 0.0, "replicas": 0.0,
                                "gpu_hours": 20.0}
    assert (found.window_start, found.window_end) == (start, start + timedelta(seconds=30))


def test_a_run_on_recorded_load_keeps_its_calibration_and_the_api_and_page_show_it(service, owner_a, api, member_b,
                                                                                  client):
    now = timezone.now()
    for i in range(40):  # one request every 3 s for two minutes, as the gateway metered them
        UsageRow.objects.create(at=now - timedelta(seconds=150 - 3 * i), tenant=service.tenant,
                                service_id=service.pk, model="chat", status=200, prompt_tokens=300,
                                completion_tokens=20, duration_ms=5.0)
    for i in range(12):  # the scraper's rows over the same two minutes: 2 ready replicas
        SeriesPoint.objects.create(service=service, role=SERVICE_ROLE, time=now - timedelta(seconds=160 - 15 * i),
                                   ttft_p50=0.1, ttft_p95=0.2, itl_p95=0.03, ready_replicas=2)
    run = start_run(service=service, trace=None, alternatives=[], actor=owner_a, via="api")
    assert execute(run.pk) == RunStatus.SUCCEEDED
    calibration = Calibration.objects.get(run=run)
    # The load runs 117 s from its first request; the fixed fleet holds 2 L4s for all of it, as the rows show.
    assert calibration.predicted["replicas"] == 2.0 and calibration.observed["replicas"] == 2.0
    assert calibration.errors_pct["replicas"] == 0.0
    body = api("owner_a").get(f"/api/v1/whatif/{run.pk}/").json()
    assert body["calibration"]["errors_pct"] == calibration.errors_pct
    listed = api("owner_a").get(f"/api/v1/whatif-calibrations/?service={service.pk}").json()["results"]
    assert [c["run"] for c in listed] == [run.pk]
    assert api("member_b").get("/api/v1/whatif-calibrations/").json()["results"] == []
    assert api("member_b").get(f"/api/v1/whatif-calibrations/{calibration.pk}/").status_code == 404

    client.force_login(owner_a)
    page = client.get(reverse("web:lab", args=["alpha", "chat"]) + f"?run={run.pk}")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="lab-calibration"' in html and 'id="lab-calibrations"' in html
    assert "Replicas (mean)</th><td>2.0</td><td>2.0</td><td>0.0 %" in html


@pytest.mark.integration
def test_calibration_in_kubesim_on_the_engines_own_telemetry(deploy, tenant_a, sim, owner_a):  # noqa: F811
    service = deploy(tenant_a, "chat")
    scrape_all()
    for _ in range(3):
        send_load(sim, service, requests=8, concurrency=4, max_tokens=32)
        scrape_all()
    run = start_run(service=service, trace=None, alternatives=[], actor=owner_a, via="api")
    assert execute(run.pk) == RunStatus.SUCCEEDED
    calibration = Calibration.objects.get(run=run)
    # Two H100 replicas serve the 24 requests in both worlds: the fleet size matches exactly; the latency
    # figures are compared and kept, whatever their error (bench/whatif.py prints the fidelity).
    assert calibration.observed["replicas"] == 2.0 and calibration.predicted["replicas"] == 2.0
    assert calibration.observed["ttft_p95_s"] > 0 and calibration.predicted["ttft_p95_s"] > 0
    assert calibration.errors_pct["ttft_p95_s"] is not None
