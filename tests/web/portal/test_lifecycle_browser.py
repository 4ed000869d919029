"""A service's life in the portal, in headless Chromium, against kubesim and a real Celery worker: create it
and see it Ready, make an inference key and ask the playground through the gateway with it, scale it, change
an engine setting and see the pods roll, delete it."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from apps.gateway.models import Upstream, UsageRow
from apps.gateway.snapshot import write_snapshot
from apps.serving.models import InferenceService, ServiceObservation
from tests.factories import ClusterFactory, ModelFactory, RuntimeFactory
from tests.gateway.served import start_gateway
from tests.polling import wait_for
from workers.telemetry import scrape_all

pytestmark = [pytest.mark.browser, pytest.mark.integration]


def ready_pods(service_id: int) -> set[str]:
    observation = ServiceObservation.objects.filter(service_id=service_id).first()
    return {p["name"] for p in (observation.pods if observation else []) if p.get("ready")}


def upstreams(service_id: int) -> list:
    scrape_all()  # the telemetry cycle, as the beat runs it every few seconds
    upstream = Upstream.objects.filter(service_id=service_id).first()
    return upstream.endpoints if upstream else []


def test_create_use_scale_change_and_delete_a_service(browser_page, live_server, kubesim_url, workers, operator_a,
                                                      tmp_path, settings):
    ClusterFactory(name="sim", api_url=kubesim_url, insecure_simulator=True)
    ModelFactory(name="llama-3-1-8b")
    RuntimeFactory(name="vllm-0-33")
    workers(1)
    page = browser_page(operator_a)

    # Create.
    page.goto(live_server.url + reverse("web:tenant-services", args=["alpha"]))
    expect(page.locator("#service-rows")).to_contain_text("No services yet")
    page.get_by_role("link", name="New service").click()
    page.get_by_label("Name", exact=True).fill("web-chat")
    page.get_by_label("Model", exact=True).select_option(label="llama-3-1-8b")
    page.get_by_label("Runtime", exact=True).select_option(label="vllm-0-33")
    page.locator("#id_pool-engine-max_replicas").fill("3")
    page.get_by_role("button", name="Create service").click()
    expect(page.locator("#messages")).to_contain_text("Service web-chat created; it will be Ready in about a minute")
    expect(page.locator("#phase")).to_have_text("Ready", timeout=120_000)
    service = InferenceService.objects.get(tenant__slug="alpha", name="web-chat")

    # An inference key from the Inference keys page, shown once.
    page.goto(live_server.url + reverse("web:inference-keys", args=["alpha"]))
    page.get_by_label("Name", exact=True).fill("playground")
    page.locator("#key-form button[type=submit]").click()
    expect(page.locator("#issued")).to_be_visible(timeout=10_000)
    key = page.locator("#issued-key").input_value()
    # The gateway, with the routing snapshot the snapshot command writes once the service's upstreams are known.
    wait_for(lambda: upstreams(service.pk), timeout=60, message="the service's upstreams")
    write_snapshot(tmp_path / "snapshot.json")
    gateway, settings.GATEWAY_URL = start_gateway({"snapshot": tmp_path / "snapshot.json"})
    try:
        # The playground streams an answer from the simulated engine, through the gateway, with that key.
        page.goto(live_server.url + reverse("web:service", args=["alpha", "web-chat"]) + "?tab=playground")
        page.get_by_label("Prompt").fill("What is a KV cache?")
        page.get_by_label("Max tokens").fill("24")
        page.get_by_label("Inference key").fill(key)
        page.get_by_role("button", name="Send").click()
        expect(page.locator("#pg-meta")).to_have_text("Done.", timeout=30_000)
        assert page.locator("#pg-answer").text_content().strip()
        assert re.fullmatch(r"\d+(\.\d)? ms", page.locator("#pg-ttft").text_content())
        assert 1 <= int(page.locator("#pg-tokens").text_content()) <= 24
        row = wait_for(lambda: UsageRow.objects.filter(service_id=service.pk).first(), message="the usage row")
        assert row.status == 200 and row.pod in ready_pods(service.pk)
        expect(page.locator("#pg-send")).to_be_focused()  # where the keyboard left it
        # A wrong key, sent with the keyboard, is refused by the gateway; the page says so and the focus moves
        # to the message.
        page.get_by_label("Inference key").fill("sk-wrong")
        page.get_by_label("Inference key").press("Enter")
        expect(page.locator("#pg-meta")).to_have_text("Error: HTTP 401: Incorrect or expired API key provided.")
        expect(page.locator("#pg-meta")).to_be_focused()
    finally:
        gateway.terminate()
        gateway.wait(timeout=30)
    # The snippet a tenant's application would run goes through the gateway with an inference key.
    expect(page.locator("#snippet-curl")).to_contain_text(f"curl -N {settings.GATEWAY_PUBLIC_URL}/v1/")
    expect(page.locator("#snippet-curl")).to_contain_text("Authorization: Bearer $INFERENCE_KEY")

    # Scale to two replicas.
    page.get_by_role("link", name="Scale").click()
    page.get_by_label("Replicas", exact=True).fill("2")
    page.get_by_role("button", name="Apply").click()
    expect(page.locator("#messages")).to_contain_text("Scaling web-chat: engine 2 (min 1, max 3)")
    wait_for(lambda: len(ready_pods(service.pk)) == 2, timeout=120, message="two ready pods")
    before = ready_pods(service.pk)

    # Change an engine setting: the pods roll to the new spec.
    page.get_by_role("link", name="Edit").click()
    page.get_by_label("Max model length (tokens)").fill("4096")
    page.get_by_role("button", name="Save changes").click()
    expect(page.locator("#messages")).to_contain_text("Service web-chat updated")

    def rolled():
        service.refresh_from_db()
        now = ready_pods(service.pk)
        return (service.phase == "Ready" and service.observed_generation == service.generation and len(now) == 2
                and not now & before and now)

    after = wait_for(rolled, timeout=180, interval=0.5, message="pods rolled to the new spec")
    page.reload()
    for pod in after:
        expect(page.locator("#pods")).to_contain_text(pod, timeout=30_000)
    for pod in before:
        expect(page.locator("#pods")).not_to_contain_text(pod)

    # Delete: type the name; the list shows Deleting until it is gone.
    page.get_by_role("link", name="Delete").click()
    page.get_by_label("Type web-chat to confirm").fill("web-chat")
    page.get_by_role("button", name="Delete service").click()
    expect(page.locator("#messages")).to_contain_text("Service web-chat is being deleted")
    rows = page.locator("#service-rows")
    expect(rows).to_contain_text("web-chat")
    wait_for(lambda: not InferenceService.objects.filter(pk=service.pk).exists(), timeout=120,
             message="the service row to go")
    expect(rows).to_contain_text("No services yet", timeout=15_000)
