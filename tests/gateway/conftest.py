"""The gateway tests' world: two tenants' services, an adapter, keys of every kind, a snapshot file."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import timedelta

import openai
import pytest
from django.utils import timezone

from apps.catalog.models import Adapter
from apps.gateway.models import InferenceKey
from apps.gateway.snapshot import write_snapshot
from tests.factories import InferenceServiceFactory, ModelFactory


def issue(tenant, name, services=()):
    key = InferenceKey(tenant=tenant, name=name)
    plaintext = key.new_secret()
    key.save()
    key.services.set(services)
    return key, plaintext


@pytest.fixture
def world(tenant_a, tenant_b, tmp_path):
    model = ModelFactory(tenant=tenant_a, name="llama-8b")
    chat = InferenceServiceFactory(tenant=tenant_a, name="chat", model=model)
    adapter = Adapter.objects.create(tenant=tenant_a, name="sql-lora", base_model=model,
                                     source_uri="hf://acme/sql-lora@main", rank=16)
    chat.adapters.add(adapter)
    InferenceServiceFactory(tenant=tenant_a, name="embed")
    InferenceServiceFactory(tenant=tenant_b, name="secret-b")
    _, all_key = issue(tenant_a, "all")
    _, chat_only = issue(tenant_a, "chat-only", [chat])
    revoked, revoked_key = issue(tenant_a, "revoked")
    revoked.revoked_at = timezone.now()
    revoked.save()
    expired, expired_key = issue(tenant_a, "expired")
    InferenceKey.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    _, bravo_key = issue(tenant_b, "b")
    limited, limited_key = issue(tenant_a, "limited")
    InferenceKey.objects.filter(pk=limited.pk).update(rpm=2)
    path = tmp_path / "snapshot.json"
    write_snapshot(path)
    return {"path": path, "all": all_key, "chat_only": chat_only, "revoked": revoked_key,
            "expired": expired_key, "bravo": bravo_key,
            "limited": limited_key, "limited_id": limited.pk}


def status_of(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def client(base, key):
    return openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=5)


def post(base, key, body: bytes):
    request = urllib.request.Request(f"{base}/v1/chat/completions", data=body, method="POST",
                                     headers={"authorization": f"Bearer {key}", "content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read())


@pytest.fixture
def served(make_cluster, transactional_db, tenant_a, tmp_path):
    """A service of alpha's Ready on kubesim's engines, with its key and snapshot (tests/gateway/served.py); a module
    that serves otherwise defines its own."""
    from tests.gateway.served import serve_on_kubesim  # it imports this module's helpers

    return serve_on_kubesim(make_cluster, tenant_a, tmp_path)


@pytest.fixture
def gateway(served):
    """A gateway process over `served`'s snapshot; its base URL."""
    from tests.gateway.served import start_gateway

    proc, base = start_gateway(served)
    yield base
    proc.terminate()
    proc.wait(timeout=30)
