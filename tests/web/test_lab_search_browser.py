"""A search's front in the lab page in headless Chromium: the chart of cost against attainment with the chosen
configuration marked, and Apply on its row changing the service through its own validation."""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from apps.core.choices import AuditVia
from apps.serving.models import InferenceService
from apps.whatif.models import RunStatus
from apps.whatif.runs import execute, start_run, upload_trace
from tests.factories import InferenceServiceFactory
from tests.web.conftest import browser_page  # noqa: F401 (the Chromium fixture)
from tests.whatif.test_api import jsonl


@pytest.mark.browser
def test_the_front_is_drawn_with_the_chosen_marked_and_applying_it_changes_the_service(
        browser_page, live_server, owner_a, tenant_a):  # noqa: F811 (the fixture imported above)
    service = InferenceServiceFactory(
        tenant=tenant_a, name="chat", engine_settings={"max_model_len": 8192},
        pools=[{"role": "engine", "replicas": 2, "min_replicas": 2, "max_replicas": 2, "gpu_type": "l4-24gb"}])
    trace = upload_trace(tenant=tenant_a, name="light", fmt="jsonl", data=jsonl(30), actor=owner_a, via=AuditVia.API)
    run = start_run(service=service, trace=trace, alternatives=None, search=True, actor=owner_a, via=AuditVia.API)
    assert execute(run.pk) == RunStatus.SUCCEEDED
    run.refresh_from_db()
    chosen = run.result["chosen"]["name"]

    page = browser_page(owner_a)
    page.goto(live_server.url + reverse("web:lab", args=["alpha", "chat"]) + f"?run={run.pk}")
    expect(page.locator("#lab-chosen")).to_be_visible()
    expect(page.locator("#lab-results tr", has=page.locator("#lab-chosen"))).to_contain_text(chosen)
    # The Pareto chart: one point per row (the current configuration and the front), the chosen one a star.
    page.wait_for_function("() => { const d = document.getElementById('chart-lab-pareto').data;"
                           " return d && d.length === 1; }", timeout=15000)
    names = page.evaluate("document.getElementById('chart-lab-pareto').data[0].text")
    symbols = page.evaluate("document.getElementById('chart-lab-pareto').data[0].marker.symbol")
    assert names[0] == "current" and chosen in names
    assert [n for n, s in zip(names, symbols, strict=True) if s == "star"] == [chosen]
    expect(page.locator("#chart-lab-pareto .xtitle")).to_have_text("GPU-hours")

    page.get_by_role("button", name=f"Apply {chosen} to chat").click()
    expect(page.get_by_text(f"Applied {chosen!r} to chat")).to_be_visible()
    engine = InferenceService.objects.get(pk=service.pk).pools.get(role="engine")
    config = run.result["chosen"]["config"]
    assert (engine.min_replicas, engine.max_replicas) == (config["min_replicas"], config["max_replicas"])
