"""LOG_FORMAT=json: one JSON object per line with request id, tenant and service where known, from the web
(request id per request, echoed in X-Request-ID) and from a real worker reconciling a service."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys

import pytest
from rest_framework.test import APIClient

from apps.serving.models import ReconcileRun
from controlplane.logcontext import ContextFilter, JsonLogFormatter
from tests.factories import ClusterFactory, ModelFactory, RuntimeFactory, TenantFactory, UserFactory
from tests.polling import wait_for
from tests.workers.conftest import ROOT, _stop, kubesim_url, workers  # noqa: F401 (fixtures)


@pytest.fixture
def json_capture():
    """The access and django.request loggers written through the JSON formatter into a buffer."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(JsonLogFormatter())
    handler.addFilter(ContextFilter())
    loggers = [logging.getLogger("controlplane.access"), logging.getLogger("django.request")]
    for logger in loggers:
        logger.addHandler(handler)
    yield buffer
    for logger in loggers:
        logger.removeHandler(handler)


@pytest.mark.django_db
def test_a_request_logs_json_with_the_callers_request_id_and_echoes_it(client, json_capture):
    response = client.get("/no-such-page/", HTTP_X_REQUEST_ID="req-42.abc")
    assert response.status_code == 404 and response["X-Request-ID"] == "req-42.abc"
    records = [json.loads(line) for line in json_capture.getvalue().splitlines()]
    assert [(r["logger"], r["level"], r["message"]) for r in records] == [
        ("controlplane.access", "INFO", "GET /no-such-page/ 404"),
        ("django.request", "WARNING", "Not Found: /no-such-page/"),
    ]
    assert [r["request_id"] for r in records] == ["req-42.abc", "req-42.abc"]
    assert records[0]["status"] == 404 and records[0]["method"] == "GET" and records[0]["duration_ms"] >= 0
    assert all("tenant" not in r and "service" not in r for r in records)  # unknown here, so absent


@pytest.mark.django_db
def test_a_request_id_that_is_not_a_plain_token_is_replaced(client):
    response = client.get("/no-such-page/", HTTP_X_REQUEST_ID="evil\u00a0id <script>")
    assert re.fullmatch(r"[0-9a-f]{32}", response["X-Request-ID"])


def test_an_unknown_log_format_stops_start_up_with_its_name():
    env = {**os.environ, "LOG_FORMAT": "xml", "DJANGO_SETTINGS_MODULE": "controlplane.settings"}
    out = subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "LOG_FORMAT='xml' is not one of text, json." in out.stderr


@pytest.mark.integration
def test_a_worker_logs_each_reconcile_as_json_with_tenant_service_and_task_id(kubesim_url, workers, monkeypatch):  # noqa: F811
    monkeypatch.setenv("LOG_FORMAT", "json")
    TenantFactory(slug="acme", gpu_quota=8)
    ClusterFactory(name="sim", api_url=kubesim_url, insecure_simulator=True)
    model, runtime = ModelFactory(name="llama-3-1-8b"), RuntimeFactory(name="vllm", tag="v0.33.0")
    (worker,) = workers(1)
    api = APIClient()
    api.force_authenticate(UserFactory(is_staff=True, is_superuser=True))
    created = api.post("/api/v1/services/", {
        "tenant": "acme", "name": "chat", "cluster": "sim", "model": model.pk, "runtime": runtime.pk,
        "deployment_mode": "standard", "engine_settings": {"max_model_len": 8192}, "routing_policy": "round_robin",
        "pools": [{"role": "engine", "replicas": 1, "min_replicas": 1, "max_replicas": 2, "gpus_per_replica": 1,
                   "gpu_type": "h100-sxm-80gb", "nodes_per_replica": 1}],
    }, format="json")
    assert created.status_code == 201, created.content
    pk = created.json()["id"]
    wait_for(lambda: ReconcileRun.objects.filter(service_id=pk).exists(), timeout=120, interval=0.3,
             message="a reconcile pass")
    output = _stop(worker)
    records = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    summaries = [r for r in records if r["message"].startswith(f"reconcile {pk}: ")]
    assert summaries, output
    for record in summaries:
        assert record["logger"] == "workers.tasks.reconcile" and record["level"] == "INFO"
        assert record["tenant"] == "acme" and record["service"] == "acme/chat"
        assert re.fullmatch(r"[0-9a-f-]{36}", record["request_id"])  # the Celery task id
    assert len({r["request_id"] for r in summaries}) == len(summaries)  # one id per task
