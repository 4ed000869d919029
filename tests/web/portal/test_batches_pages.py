"""The Batches page's doors without a browser: another tenant's batch and file are 404, a viewer's cancel is
403, and a batch past stopping is left as it is with a message saying so."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.gateway.models import Batch, File

pytestmark = pytest.mark.django_db


@pytest.fixture
def stored(tenant_a):
    now = timezone.now()
    File.objects.create(id="file-out", tenant=tenant_a, purpose="batch_output", filename="out.jsonl", bytes=3,
                        lines=1, content=b"{}\n", created_at=now)
    common = {"tenant": tenant_a, "key_id": 1, "endpoint": "/v1/completions", "input_file_id": "file-in",
              "created_at": now, "expires_at": now + timedelta(hours=24)}
    return {"running": Batch.objects.create(id="batch_running", status="in_progress", total=3, **common),
            "done": Batch.objects.create(id="batch_done", status="completed", total=3, completed=3, **common)}


def cancel(client, user, batch_id):
    client.force_login(user)
    return client.post(reverse("web:batch-cancel", args=["alpha", batch_id]), follow=True)


def test_another_tenants_batch_and_file_are_404(client, stored, member_b):
    client.force_login(member_b)
    assert client.get(reverse("web:file-download", args=["alpha", "file-out"])).status_code == 404
    assert cancel(client, member_b, "batch_running").status_code == 404
    assert Batch.objects.get(pk="batch_running").status == "in_progress"


def test_a_viewer_reads_but_cannot_cancel(client, stored, viewer_a):
    client.force_login(viewer_a)
    assert client.get(reverse("web:file-download", args=["alpha", "file-out"])).content == b"{}\n"
    assert cancel(client, viewer_a, "batch_running").status_code == 403
    assert Batch.objects.get(pk="batch_running").status == "in_progress"


def test_a_finished_batch_is_not_cancelled_and_the_page_says_why(client, stored, operator_a):
    page = cancel(client, operator_a, "batch_done").content.decode()
    assert "Batch batch_done is already completed." in page
    assert Batch.objects.get(pk="batch_done").status == "completed"
    assert "is being cancelled" in cancel(client, operator_a, "batch_running").content.decode()
    assert Batch.objects.get(pk="batch_running").status == "cancelling"
