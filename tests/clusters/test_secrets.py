"""Cluster credentials: encrypted at rest, write-only in the API, redacted in audit, absent from logs."""

from __future__ import annotations

import logging

import pytest
from cryptography.fernet import Fernet
from django.db import connection

from apps.clusters.models import Cluster
from apps.core.fields import _fernet_for
from apps.core.models import AuditEntry

TOKEN = "sekret-bearer-7f3a9c"
KUBECONFIG = "apiVersion: v1\nkind: Config\nusers: [{name: u, user: {token: kubeconfig-sekret-41d2}}]\n"


@pytest.fixture
def created(api, staff, caplog):
    caplog.set_level(logging.DEBUG)
    response = api("staff").post(
        "/api/v1/clusters/",
        {"name": "prod", "api_url": "https://k8s.example.com", "bearer_token": TOKEN, "kubeconfig": KUBECONFIG},
        format="json",
    )
    assert response.status_code == 201
    return response


def test_credentials_are_encrypted_in_the_database(created):
    with connection.cursor() as cursor:
        cursor.execute("SELECT bearer_token, kubeconfig FROM clusters_cluster WHERE name = 'prod'")
        stored_token, stored_kubeconfig = cursor.fetchone()
    assert TOKEN not in stored_token
    assert "kubeconfig-sekret" not in stored_kubeconfig
    assert Cluster.objects.get(name="prod").credentials().bearer_token == TOKEN


def test_credentials_never_appear_in_responses(api, created):
    cluster_id = created.json()["id"]
    client = api("staff")
    bodies = [
        created.content,
        client.get("/api/v1/clusters/").content,
        client.get(f"/api/v1/clusters/{cluster_id}/").content,
        client.patch(f"/api/v1/clusters/{cluster_id}/", {"description": "x"}, format="json").content,
        client.get("/api/schema/").content,
    ]
    for body in bodies:
        assert TOKEN.encode() not in body
        assert b"kubeconfig-sekret" not in body
    assert created.json()["has_bearer_token"] is True


def test_credentials_never_appear_in_logs(api, created, caplog):
    api("staff").patch(f"/api/v1/clusters/{created.json()['id']}/", {"bearer_token": ""}, format="json")
    # A refused write logs the request; it must not log the submitted secret either.
    api("staff").post("/api/v1/clusters/", {"name": "Bad Name", "api_url": "x", "bearer_token": TOKEN}, format="json")
    assert caplog.records, "the requests above should have produced log records"
    assert TOKEN not in caplog.text
    assert "kubeconfig-sekret" not in caplog.text


def test_audit_entries_redact_credentials(created):
    entry = AuditEntry.objects.get(object_id=str(created.json()["id"]), action="create")
    assert entry.after["bearer_token"] == "<redacted>"
    assert TOKEN not in str(entry.after)


def test_credentials_repr_hides_secrets(created):
    assert TOKEN not in repr(Cluster.objects.get(name="prod").credentials())


def test_keys_rotate_old_ciphertext_stays_readable(settings, created):
    new_key = Fernet.generate_key().decode()
    settings.FIELD_ENCRYPTION_KEYS = [new_key, *settings.FIELD_ENCRYPTION_KEYS]
    _fernet_for.cache_clear()
    cluster = Cluster.objects.get(name="prod")
    assert cluster.bearer_token == TOKEN
    cluster.save()
    settings.FIELD_ENCRYPTION_KEYS = [new_key]
    assert Cluster.objects.get(name="prod").bearer_token == TOKEN


def test_a_real_cluster_needs_credentials_and_https(api, staff):
    response = api("staff").post(
        "/api/v1/clusters/", {"name": "bare", "api_url": "http://k8s.example.com"}, format="json"
    )
    assert response.status_code == 400
    assert {"bearer_token", "api_url"} <= set(response.json())
