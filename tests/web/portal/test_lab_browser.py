"""The what-if lab in headless Chromium at 390 px: opened from the service page, a bad trace refused beside the
file input (line and column), a good one uploaded and picked, an alternative the service refuses shown on its
own row, a run started, followed while a worker's code replays it, its table and plots drawn, and one
alternative applied as an audited change of the service; axe-core clean and no sideways scrolling."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from apps.core.models import AuditEntry
from apps.serving.models import InferenceService
from apps.whatif.models import Advice, GpuPrice, Run, RunStatus, Trace
from apps.whatif.runs import execute
from tests.factories import InferenceServiceFactory
from tests.web.conftest import browser_page  # noqa: F401 (the Chromium fixture)
from tests.web.portal.page_checks import page_width, serious_axe_violations

pytestmark = pytest.mark.browser

AZURE_BAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,12,3\n2023-11-16 x,12,3\n"


@pytest.fixture
def chat(tenant_a):
    GpuPrice.objects.create(gpu_type="l4-24gb", usd_per_gpu_hour="0.80")
    return InferenceServiceFactory(
        tenant=tenant_a, name="chat",
        pools=[{"role": "engine", "replicas": 1, "min_replicas": 1, "max_replicas": 2, "gpu_type": "l4-24gb"}],
        engine_settings={"max_model_len": 8192})


def test_upload_run_read_and_apply_in_the_lab(browser_page, live_server, owner_a, chat, tmp_path):  # noqa: F811
    # A confirmed piece of advice (as apps.whatif.advice keeps it) shows as a card on the service page.
    Advice.objects.create(service=chat, rule="fewer_replicas", inputs={"ttft_p95": 0.1, "replicas": 2.0},
                          alternative={"name": "1 replica", "replicas": 1},
                          predicted={"figure": "gpu_hours", "current": 0.33, "suggested": 0.16, "effect_pct": 51.5,
                                     "requests": 60})
    page = browser_page(owner_a, viewport={"width": 390, "height": 844})
    page.goto(live_server.url + reverse("web:service", args=["alpha", "chat"]))
    expect(page.locator("#advice-fewer_replicas")).to_contain_text("GPU-hours: 0.33 → 0.16 (51.5 % better")
    assert serious_axe_violations(page, "#advice") == []
    page.locator("#open-lab").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="What-if lab")).to_be_visible()
    assert serious_axe_violations(page) == []

    # A bad Azure row: refused beside the file input, naming line and column; nothing stored.
    bad = tmp_path / "bad.csv"
    bad.write_text(AZURE_BAD)
    page.get_by_label("Trace name").fill("bad")
    page.get_by_label("Format").select_option("azure")
    page.get_by_label("Trace file").set_input_files(str(bad))
    page.locator("#trace-upload").click()
    expect(page.locator("#trace-form")).to_contain_text("line 3, column TIMESTAMP")
    assert Trace.objects.count() == 0

    good = tmp_path / "hour.jsonl"
    good.write_text("\n".join(json.dumps({"timestamp": i * 2, "prompt_tokens": 400, "output_tokens": 30})
                              for i in range(30)))
    page.get_by_label("Trace name").fill("hour")
    page.get_by_label("Format").select_option("jsonl")
    page.get_by_label("Trace file").set_input_files(str(good))
    page.locator("#trace-upload").click()
    expect(page.locator("#messages")).to_contain_text("Trace hour uploaded: 30 requests")

    # The rows come with the lab's default alternatives; the fourth asks for TP 3 on one GPU, which the
    # service's own validation refuses: the error shows on that row and no run is stored.
    page.get_by_role("form", name="New run").get_by_label("Load", exact=True).select_option(label="Trace hour: 30 requests over 58 s")
    fourth = page.locator("#alternative-3")
    fourth.get_by_label("Name").fill("tp3")
    fourth.get_by_label("Tensor parallel size").fill("3")
    page.locator("#lab-start").click()
    expect(page.locator("#alternative-3-errors")).to_contain_text("needs 3 GPU(s); a replica has 1")
    assert Run.objects.count() == 0

    page.locator("#alternative-3").get_by_label("Name").fill("two replicas")
    page.locator("#alternative-3").get_by_label("Tensor parallel size").fill("")
    page.locator("#alternative-3").get_by_label("Replicas", exact=True).fill("2")
    page.locator("#alternative-3").get_by_label("Max replicas").fill("2")
    page.locator("#lab-start").click()
    expect(page.locator("#lab-run-status")).to_have_text("Queued")
    run = Run.objects.get()
    assert run.trace.name == "hour" and len(run.alternatives) == 4

    # A worker replays it (the task's own code); the page's poll shows the results and draws the plots.
    assert execute(run.pk) == RunStatus.SUCCEEDED
    expect(page.locator("#lab-run-status")).to_have_text("Succeeded", timeout=15_000)
    rows = page.locator("#lab-results tbody tr")
    expect(rows).to_have_count(5)
    expect(rows.first).to_contain_text("current")
    for chart in ("#chart-lab-replicas", "#chart-lab-ttft", "#chart-lab-pareto"):
        expect(page.locator(f"{chart} .main-svg").first).to_be_attached()
    width, wide = page_width(page)
    assert width <= 391, wide
    assert serious_axe_violations(page) == []

    page.get_by_role("button", name="Apply two replicas to chat").click()
    expect(page.locator("#messages")).to_contain_text("Applied 'two replicas' to chat")
    engine = InferenceService.objects.get(pk=chat.pk).pools.get(role="engine")
    assert (engine.replicas, engine.max_replicas) == (2, 2)
    assert AuditEntry.objects.for_object(chat).filter(via="portal", action="update").count() == 1
