"""End to end: a service reconciled onto kubesim, load through its service proxy, two scrape cycles through
the pod proxy, and the figures on the service page, its chart data, the fleet overview and the API."""

from __future__ import annotations

import threading

from django.urls import reverse

from apps.telemetry.models import PodStat
from tests.polling import wait_for
from tests.telemetry.conftest import requests_running, send_load
from workers.telemetry import scrape_all


def test_load_drives_ttft_and_kv_figures_onto_the_service_page(deploy, tenant_a, sim, login, viewer_a, api):
    service = deploy(tenant_a, "chat")
    scrape_all()
    send_load(sim, service, requests=12, concurrency=6)
    background = threading.Thread(target=send_load, args=(sim, service), kwargs={"requests": 6, "max_tokens": 400})
    background.start()
    # Scrape once an engine reports some of them running (polled, not slept: the machine may be slow).
    wait_for(lambda: requests_running(sim, service) > 0, message="requests running")
    scrape_all()
    background.join(60)

    client = login(viewer_a)
    series = client.get(reverse("web:service-series", args=[service.tenant.slug, service.name])).json()
    assert series["ready_replicas"] == [2, 2]
    assert series["ttft_p95"][0] is None and series["ttft_p95"][1] > 0
    assert series["kv_usage"][1] > 0 and series["running"][1] >= 1

    page = client.get(reverse("web:service", args=[service.tenant.slug, service.name])).content.decode()
    pods = page[page.index('id="pods"'):]
    for stat in PodStat.objects.filter(service=service):
        row = pods[pods.index(stat.pod):].split("</tr>")[0]
        # The scraped TTFT p95 of this pod, formatted as the page does, and its H100 node.
        assert f"{stat.figures['ttft_p95_s'] * 1000:.1f} ms" in row
        assert "gpu-h100-sxm-80gb-0" in row and "NVIDIA-H100" in row

    fleet = client.get(reverse("web:home")).content.decode()
    worst = fleet[fleet.index("Worst TTFT p95"):fleet.index("Highest KV-cache usage")]
    assert "alpha/chat" in worst

    data = api("viewer_a").get(f"/api/v1/services/{service.pk}/metrics/").json()
    assert data["ttft_p95"] == series["ttft_p95"] and data["kv_usage"] == series["kv_usage"]
