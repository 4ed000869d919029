"""The lab page's forms without a browser: an upload over the size limit and another tenant's lab."""

from __future__ import annotations

import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from apps.whatif.models import Trace
from tests.factories import InferenceServiceFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def chat(tenant_a):
    return InferenceServiceFactory(tenant=tenant_a, name="chat",
                                   pools=[{"role": "engine", "replicas": 1, "gpu_type": "l4-24gb"}])


def test_an_upload_over_the_limit_is_refused_beside_the_file_input(client, owner_a, chat, settings):
    settings.WHATIF_TRACE_MAX_BYTES = 50
    client.force_login(owner_a)
    content = b'{"timestamp": 0, "prompt_tokens": 10, "output_tokens": 5}\n' * 3  # 177 bytes
    response = client.post(reverse("web:lab-upload", args=["alpha", "chat"]),
                           {"name": "big", "format": "jsonl", "file": SimpleUploadedFile("t.jsonl", content)})
    assert response.status_code == 422
    assert "The trace is larger than 50 bytes, the most that may be uploaded (WHATIF_TRACE_MAX_BYTES)." in \
        response.content.decode()
    assert Trace.objects.count() == 0


def test_another_tenants_lab_is_a_404(client, member_b, chat):
    client.force_login(member_b)
    assert client.get(reverse("web:lab", args=["alpha", "chat"])).status_code == 404
    assert client.post(reverse("web:lab", args=["alpha", "chat"]), {}).status_code == 404


@pytest.mark.parametrize(("content", "where"), [
    (b'{"timestamp": 0, "prompt_tokens": 10, "output_tokens": 5}\n' + b"[" * 10_000,
     "line 2: not JSON this parser reads (nested too deeply)"),
    (b'{"timestamp": 1e308, "prompt_tokens": 10, "output_tokens": 5}', "line 1, column timestamp: 1e+308 is not from 0"),
])
def test_a_nested_or_unbounded_trace_is_refused_beside_the_file_input(client, owner_a, chat, content, where):
    client.force_login(owner_a)
    response = client.post(reverse("web:lab-upload", args=["alpha", "chat"]),
                           {"name": "bad", "format": "jsonl", "file": SimpleUploadedFile("t.jsonl", content)})
    assert response.status_code == 422
    html = response.content.decode()
    # The reason is in the file input's own error list, which the input names as describing it.
    errors = re.search(r'<ul class="errorlist" id="id_file_error">(.*?)</ul>', html, re.S)
    assert errors and where in errors[1], html
    assert re.search(r'<input type="file" name="file"[^>]*aria-invalid="true"[^>]*aria-describedby="[^"]*'
                     r'id_file_error[^"]*" id="id_file"', html)
    assert Trace.objects.count() == 0
