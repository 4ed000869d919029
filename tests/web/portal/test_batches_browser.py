"""The portal's Batches page in headless Chromium: a bad file refused at its field with the focus there and
nothing stored, a good one queued as a batch, progress shown, a cancel, the output and error files downloaded."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import expect

from apps.gateway.models import Batch, File
from tests.gateway.conftest import issue
from tests.web.portal.test_gateway_browser import PHONE, checked

pytestmark = pytest.mark.browser


def line(custom_id: str) -> bytes:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
                       "body": {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}}).encode()


def upload(page, name: str, content: bytes) -> None:
    page.locator("#id_file").set_input_files({"name": name, "mimeType": "application/jsonl", "buffer": content})
    page.get_by_role("button", name="Start batch").click()


def test_a_bad_file_is_refused_at_its_field_and_a_good_one_queued_then_cancelled(
        browser_page, live_server, operator_a, tenant_a):
    issue(tenant_a, "nightly")
    page = browser_page(operator_a, viewport=PHONE)
    page.goto(live_server.url + reverse("web:batches", args=["alpha"]))
    checked(page)

    upload(page, "latin1.jsonl", line("a") + b"\n\xe9t\xe9\n")
    expect(page.locator("#batch-form")).to_contain_text("The file is not UTF-8 (byte")
    expect(page.locator("#id_file")).to_be_focused()
    expect(page.locator("#id_file")).to_have_attribute("aria-invalid", "true")
    assert not File.objects.exists() and not Batch.objects.exists()
    checked(page)

    upload(page, "nightly.jsonl", line("a") + b"\n" + line("b") + b"\n")
    batch = Batch.objects.get()
    row = page.locator(f"#row-{batch.id}")
    expect(row).to_contain_text("Validating")
    expect(row).to_contain_text("0 of 2 lines")
    assert (batch.total, File.objects.get(pk=batch.input_file_id).lines) == (2, 2)

    page.get_by_role("button", name=f"Cancel batch {batch.id}").click()
    expect(page.locator(f"#row-{batch.id} .status")).to_have_text("Cancelling")
    expect(page.get_by_role("button", name=f"Cancel batch {batch.id}")).to_have_count(0)
    assert Batch.objects.get().status == "cancelling"


def test_progress_and_the_output_and_error_files_download(browser_page, live_server, viewer_a, tenant_a):
    key, _ = issue(tenant_a, "nightly")
    now = timezone.now()
    files = {name: File.objects.create(id=f"file-{name}", tenant=tenant_a, purpose="batch_output",
                                       filename=f"{name}.jsonl", bytes=len(body), lines=1, content=body,
                                       created_at=now)
             for name, body in (("out", b'{"custom_id": "a"}\n'), ("err", b'{"custom_id": "b"}\n'))}
    common = {"tenant": tenant_a, "key_id": key.pk, "endpoint": "/v1/chat/completions", "input_file_id": "file-in",
              "expires_at": now + timedelta(hours=24)}
    Batch.objects.create(id="batch_running", status="in_progress", total=4, completed=2, failed=1,
                         created_at=now, **common)
    Batch.objects.create(id="batch_done", status="completed", total=2, completed=1, failed=1,
                         output_file_id="file-out", error_file_id="file-err", created_at=now - timedelta(hours=1),
                         **common)
    page = browser_page(viewer_a, viewport=PHONE)
    page.goto(live_server.url + reverse("web:batches", args=["alpha"]))
    checked(page)
    running = page.locator("#row-batch_running")
    expect(running).to_contain_text("3 of 4 lines, 1 failed")
    expect(running.locator("meter")).to_have_attribute("value", "75")
    # A viewer reads and downloads; only owners and operators start and cancel batches.
    expect(page.locator("#batch-form")).to_have_count(0)
    expect(page.get_by_role("button", name="Cancel batch batch_running")).to_have_count(0)

    # The page follows the runner's progress by itself.
    Batch.objects.filter(pk="batch_running").update(completed=3)
    expect(running).to_contain_text("4 of 4 lines, 1 failed")

    for link, body in (("Output", files["out"].content), ("Errors", files["err"].content)):
        with page.expect_download() as download:
            page.locator("#row-batch_done").get_by_role("link", name=link).click()
        with open(download.value.path(), "rb") as handle:
            assert handle.read() == bytes(body)
