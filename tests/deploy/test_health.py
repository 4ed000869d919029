"""/healthz and /readyz: no authentication, no host check, no detail; readiness follows the database and
the broker."""

from __future__ import annotations

import json

import pytest
from django.db import connection

PROBE_HOST = "10.244.0.17:8000"  # a kubelet probe addresses the pod IP, which ALLOWED_HOSTS never lists


@pytest.fixture
def production_like(settings):
    settings.DEBUG = False
    settings.SECURE_SSL_REDIRECT = True
    settings.ALLOWED_HOSTS = ["controlplane.example.com"]


def test_healthz_answers_ok_to_an_anonymous_probe_at_the_pod_ip(client, production_like):
    response = client.get("/healthz", HTTP_HOST=PROBE_HOST)
    assert response.status_code == 200
    assert json.loads(response.content) == {"status": "ok"}
    assert response["Cache-Control"] == "no-store"


@pytest.mark.django_db
def test_readyz_is_ready_when_database_and_broker_answer(client, production_like):
    response = client.get("/readyz", HTTP_HOST=PROBE_HOST)
    assert response.status_code == 200
    assert json.loads(response.content) == {"status": "ready"}


@pytest.mark.django_db
def test_readyz_is_unavailable_without_naming_the_broker_or_the_error(client, production_like, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {}
    response = client.get("/readyz", HTTP_HOST=PROBE_HOST)
    assert response.status_code == 503
    assert response.content == b'{"status": "unavailable"}'


@pytest.mark.django_db(transaction=True)
def test_readyz_is_unavailable_when_the_database_does_not_answer_but_healthz_stays_ok(client, production_like):
    connection.close()
    saved = connection.settings_dict["PORT"], connection.settings_dict["HOST"]
    connection.settings_dict["HOST"], connection.settings_dict["PORT"] = "127.0.0.1", "1"
    try:
        ready = client.get("/readyz", HTTP_HOST=PROBE_HOST)
        alive = client.get("/healthz", HTTP_HOST=PROBE_HOST)
    finally:
        connection.close()
        connection.settings_dict["PORT"], connection.settings_dict["HOST"] = saved
    assert ready.status_code == 503 and ready.content == b'{"status": "unavailable"}'
    assert alive.status_code == 200


def test_health_endpoints_refuse_writes(client, production_like):
    response = client.post("/healthz", HTTP_HOST=PROBE_HOST)
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"


@pytest.mark.django_db
def test_other_paths_still_get_the_host_check_and_the_https_redirect(client, production_like):
    assert client.get("/healthz/", HTTP_HOST=PROBE_HOST).status_code == 400  # DisallowedHost
    response = client.get("/admin/", HTTP_HOST="controlplane.example.com")
    assert response.status_code == 301 and response["Location"].startswith("https://")
