"""A tenant's Hugging Face token for private adapters: set through the API write-only, kept encrypted, never
returned or audited in clear; a vLLM engine reads it as HF_TOKEN from the Secret hf-token, so vLLM can download a
private adapter it loads at run time, and adding such an adapter still changes no pod template."""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.db import connection

from apps.core.models import AuditEntry
from apps.serving.rendering.spec import AdapterSpec, spec_from_service
from apps.tenancy.models import Tenant
from tests.factories import InferenceServiceFactory
from tests.serving.golden.specs import SPECS
from tests.serving.test_run_time_adapters import _engine as _pod

TOKEN = "hf_privateTestToken0123456789"
ENV = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}
HASH = "controlplane.io/pod-template-hash"
PRIVATE = AdapterSpec("sql", "hf://acme/private-sql-lora", 16)


def test_a_vllm_engine_reads_the_tenants_token_and_a_private_adapter_added_changes_no_template():
    base = SPECS["standard-vllm"]()  # its tenant has a token: model_token_secret "hf-token"
    engine = _pod(base)["spec"]["containers"][0]
    assert ENV in engine["env"]
    with_adapter = _pod(replace(base, adapters=(PRIVATE,)))
    assert with_adapter["metadata"]["annotations"][HASH] == _pod(base)["metadata"]["annotations"][HASH]
    assert ENV in with_adapter["spec"]["containers"][0]["env"]
    none = _pod(replace(base, model_token_secret=None))["spec"]["containers"][0]
    assert all(e["name"] != "HF_TOKEN" for e in none.get("env", []))


@pytest.mark.django_db
def test_the_token_is_written_through_the_api_never_returned_stored_encrypted_and_audited_redacted(
        api, tenant_a, owner_a, staff):
    url = f"/api/v1/tenants/{tenant_a.pk}/"
    response = api("staff").patch(url, {"hf_token": TOKEN}, format="json")
    assert response.status_code == 200, response.content
    assert "hf_token" not in response.json() and response.json()["has_hf_token"] is True
    assert TOKEN not in response.content.decode()
    for reader in ("staff", "owner_a"):
        body = api(reader).get(url).content.decode()
        assert TOKEN not in body and '"has_hf_token":true' in body.replace(" ", "")
    with connection.cursor() as cursor:
        cursor.execute("SELECT hf_token FROM tenancy_tenant WHERE id = %s", [tenant_a.pk])
        stored = cursor.fetchone()[0]
    assert stored and TOKEN not in stored  # a Fernet token, not the plaintext
    assert Tenant.objects.get(pk=tenant_a.pk).hf_token == TOKEN
    assert not [e for e in AuditEntry.objects.all() if TOKEN in str(e.before) + str(e.after)]
    # The tenant's services render with the Secret; clearing the token removes it.
    service = InferenceServiceFactory(tenant=tenant_a, name="chat")
    assert spec_from_service(service).model_token_secret == "hf-token"
    assert api("staff").patch(url, {"hf_token": ""}, format="json").json()["has_hf_token"] is False
    assert spec_from_service(service).model_token_secret is None


@pytest.mark.django_db
@pytest.mark.parametrize(("actor", "status"), [("owner_a", 200), ("viewer_a", 403), ("member_b", 404)])
def test_only_the_tenants_owner_or_staff_set_its_token(api, tenant_a, owner_a, viewer_a, member_b, actor, status):
    response = api(actor).patch(f"/api/v1/tenants/{tenant_a.pk}/", {"hf_token": TOKEN}, format="json")
    assert response.status_code == status, response.content
    assert TOKEN not in response.content.decode()
    assert bool(Tenant.objects.get(pk=tenant_a.pk).hf_token) is (status == 200)
