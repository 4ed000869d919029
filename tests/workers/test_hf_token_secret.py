"""The tenant's Hugging Face token reaches its namespace as the Secret hf-token, applied by the reconcile pass from
the encrypted field against kubesim over HTTP (not a rendered object: no render, drift or log shows it), left alone
while unchanged, and deleted once the tenant has none; the engine pod reads it as HF_TOKEN."""

from __future__ import annotations

import base64
import logging

import pytest

from apps.serving.models import ServiceObservation
from tests.workers.test_reconcile_e2e import create_service, engine_pods, stack, wait_for  # noqa: F401
from workers.reconcile import reconcile

pytestmark = pytest.mark.integration
TOKEN = "hf_privateTestToken0123456789"


def _secret(parts):
    found = parts["core"].list_namespaced_secret("tenant-acme", field_selector="metadata.name=hf-token").items
    return found[0] if found else None


def test_the_tenants_token_is_applied_as_a_secret_the_engine_reads_and_removed_with_it(stack, caplog):  # noqa: F811
    caplog.set_level(logging.DEBUG)
    stack["tenant"].hf_token = TOKEN
    stack["tenant"].save()
    created = create_service(stack, name="private")
    pk, uid = created["id"], created["uid"]
    reconcile(pk)
    secret = _secret(stack)
    assert base64.b64decode(secret.data["token"]).decode() == TOKEN
    version = secret.metadata.resource_version
    wait_for(lambda: reconcile(pk).result == "converged", what="converged")
    assert _secret(stack).metadata.resource_version == version  # unchanged: not written again
    [pod] = engine_pods(stack, uid)
    env = {e.name: e.value_from for e in next(c for c in pod.spec.containers if c.name == "engine").env}
    assert (env["HF_TOKEN"].secret_key_ref.name, env["HF_TOKEN"].secret_key_ref.key) == ("hf-token", "token")

    stack["tenant"].hf_token = ""
    stack["tenant"].save()
    reconcile(pk)
    assert _secret(stack) is None
    assert TOKEN not in caplog.text
    assert TOKEN not in str(ServiceObservation.objects.get(service_id=pk).drift)
