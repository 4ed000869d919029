"""Inference keys through /api/v1/inference-keys/: shown once, hashed, scoped per tenant, revoked, rotated."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.core.models import AuditEntry
from apps.gateway.models import InferenceKey
from tests.factories import InferenceServiceFactory

URL = "/api/v1/inference-keys/"
pytestmark = pytest.mark.django_db


def create(client, **fields):
    return client.post(URL, {"tenant": "alpha", "name": "app", **fields}, format="json")


def test_create_shows_the_secret_once_and_stores_only_its_sha256(api, owner_a):
    client = api("owner_a")
    response = create(client, rpm=60, tpm=10000)
    assert response.status_code == 201, response.json()
    plaintext = response.json()["key"]
    assert plaintext.startswith("sk-") and len(plaintext) > 40
    stored = InferenceKey.objects.get(pk=response.json()["id"])
    assert stored.key_hash == hashlib.sha256(plaintext.encode()).hexdigest()
    assert plaintext not in str(stored.__dict__)
    assert response.json()["prefix"] == plaintext[:11]
    listed = client.get(URL).json()["results"]
    assert [row["name"] for row in listed] == ["app"]
    assert "key" not in listed[0] and plaintext not in str(listed)
    assert "key" not in client.get(f"{URL}{stored.pk}/").json()
    # Expiry defaults to the cap (90 days from issue), as for API tokens.
    assert abs(stored.expires_at - (stored.issued_at + timedelta(days=90))) < timedelta(seconds=1)


def test_create_is_audited_without_the_hash(api, operator_a):
    response = create(api("operator_a"), services=[])
    assert response.status_code == 201, response.json()
    entry = AuditEntry.objects.get(object_id=str(response.json()["id"]), action="create")
    assert entry.after["key_hash"] == "<redacted>"
    assert entry.tenant.slug == "alpha"


def test_viewer_cannot_create_and_another_tenant_sees_nothing(api, owner_a, viewer_a, member_b):
    assert create(api("viewer_a")).status_code == 403
    key_id = create(api("owner_a")).json()["id"]
    other = api("member_b")
    assert other.get(URL).json()["results"] == []
    assert other.get(f"{URL}{key_id}/").status_code == 404
    assert other.post(f"{URL}{key_id}/revoke/").status_code == 404
    assert create(other).status_code == 400  # alpha is not a tenant bravo's owner may name


def test_allowed_services_are_the_tenants_own(api, owner_a, tenant_a, tenant_b):
    InferenceServiceFactory(tenant=tenant_a, name="chat")
    InferenceServiceFactory(tenant=tenant_b, name="secret-b")
    client = api("owner_a")
    response = create(client, services=["chat"])
    assert response.status_code == 201, response.json()
    assert response.json()["services"] == ["chat"]
    refused = create(client, name="other", services=["secret-b"])
    assert refused.status_code == 400
    assert "services" in refused.json()


@pytest.mark.parametrize("field,value", [("rpm", 0), ("tpm", -5), ("concurrency", "many"),
                                         ("monthly_token_budget", 0)])
def test_bad_limits_are_refused_naming_the_field(api, owner_a, field, value):
    response = create(api("owner_a"), **{field: value})
    assert response.status_code == 400
    assert field in response.json()


def test_expiry_must_be_future_and_within_the_cap(api, owner_a):
    client = api("owner_a")
    past = create(client, expires_at=(timezone.now() - timedelta(hours=1)).isoformat())
    assert past.status_code == 400 and "expires_at" in past.json()
    far = create(client, expires_at=(timezone.now() + timedelta(days=91)).isoformat())
    assert far.status_code == 400 and "expires_at" in far.json()
    soon = timezone.now() + timedelta(days=7)
    assert create(client, expires_at=soon.isoformat()).status_code == 201


def test_duplicate_name_in_a_tenant_is_a_conflict(api, owner_a):
    client = api("owner_a")
    assert create(client).status_code == 201
    response = create(client)
    # A name clash is 409 across this API (apps.core.api.exceptions), with the field named.
    assert response.status_code == 409 and "name" in str(response.json())


def test_revoke_is_final_and_rotate_replaces_the_secret(api, owner_a):
    client = api("owner_a")
    first = create(client).json()
    rotated = client.post(f"{URL}{first['id']}/rotate/", {}, format="json")
    assert rotated.status_code == 200, rotated.json()
    new = rotated.json()["key"]
    assert new != first["key"]
    assert InferenceKey.objects.get(pk=first["id"]).key_hash == hashlib.sha256(new.encode()).hexdigest()
    revoked = client.post(f"{URL}{first['id']}/revoke/")
    assert revoked.status_code == 200 and revoked.json()["revoked"] is True
    assert client.post(f"{URL}{first['id']}/rotate/", {}, format="json").status_code == 409
    assert not InferenceKey.objects.get(pk=first["id"]).is_active


def test_viewer_cannot_revoke(api, owner_a, viewer_a):
    key_id = create(api("owner_a")).json()["id"]
    assert api("viewer_a").post(f"{URL}{key_id}/revoke/").status_code == 403
    assert InferenceKey.objects.get(pk=key_id).revoked_at is None


def test_tenant_limits_are_set_by_staff_only(api, owner_a, staff):
    body = {"tenant": "alpha", "rpm": 600, "tpm": 100000}
    assert api("owner_a").post("/api/v1/tenant-limits/", body, format="json").status_code == 403
    response = api("staff").post("/api/v1/tenant-limits/", body, format="json")
    assert response.status_code == 201, response.json()
    assert api("owner_a").get("/api/v1/tenant-limits/").json()["results"][0]["rpm"] == 600
