"""Bearer tokens and sessions: what authenticates, what is refused with 401, what a token records."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from apps.tenancy.models import ApiToken, hash_token
from tests.factories import issue_token


def bearer(plaintext: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return client


def test_a_valid_token_authenticates_and_records_last_use(owner_a):
    token, plaintext = issue_token(owner_a)
    assert bearer(plaintext).get("/api/v1/services/").status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None


@pytest.mark.parametrize("plaintext", ["not-a-token", ""])
def test_unknown_tokens_are_401(db, plaintext):
    response = bearer(plaintext).get("/api/v1/services/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"


def test_expired_token_is_401(owner_a):
    token, plaintext = issue_token(owner_a, expires_days=1)
    token.expires_at = timezone.now() - timedelta(seconds=1)
    token.save()
    assert bearer(plaintext).get("/api/v1/services/").json()["detail"] == "Token expired."


def test_revoking_through_the_api_makes_the_token_401(api, owner_a):
    token, plaintext = issue_token(owner_a, name="to-revoke")
    response = api("owner_a").patch(f"/api/v1/tokens/{token.pk}/", {"revoked": True}, format="json")
    assert response.json()["revoked"] is True
    assert bearer(plaintext).get("/api/v1/services/").status_code == 401


def test_a_revoked_token_cannot_be_restored(api, owner_a):
    token, _ = issue_token(owner_a)
    client = api("owner_a")
    client.patch(f"/api/v1/tokens/{token.pk}/", {"revoked": True}, format="json")
    assert client.patch(f"/api/v1/tokens/{token.pk}/", {"revoked": False}, format="json").status_code == 400


def test_only_the_hash_is_stored_and_the_plaintext_is_returned_once(api, owner_a, caplog):
    caplog.set_level(logging.DEBUG)
    client = api("owner_a")
    created = client.post("/api/v1/tokens/", {"name": "ci", "tenant": "alpha"}, format="json").json()
    plaintext = created["token"]
    token = ApiToken.objects.get(pk=created["id"])
    assert token.key_hash == hash_token(plaintext)
    assert plaintext not in str(ApiToken.objects.filter(pk=token.pk).values().get())
    assert created["prefix"] == plaintext[:8]
    for body in (client.get(f"/api/v1/tokens/{token.pk}/").content, client.get("/api/v1/tokens/").content):
        assert plaintext.encode() not in body
        assert token.key_hash.encode() not in body
    assert bearer(plaintext).get("/api/v1/tenants/").status_code == 200
    assert plaintext not in caplog.text


def test_a_tenant_bound_token_cannot_mint_an_unbound_one(owner_a, tenant_a):
    _, plaintext = issue_token(owner_a, tenant_a)
    response = bearer(plaintext).post("/api/v1/tokens/", {"name": "escape"}, format="json")
    assert response.status_code == 403


def test_browsers_use_the_session(owner_a):
    client = APIClient()
    client.force_login(owner_a)
    assert client.get("/api/v1/services/").status_code == 200


def test_session_writes_need_the_csrf_token(owner_a):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(owner_a)
    assert client.post("/api/v1/tokens/", {"name": "x"}, format="json").status_code == 403


def test_anonymous_is_401(db):
    assert APIClient().get("/api/v1/tenants/").status_code == 401


def test_a_viewer_cannot_change_the_tenant_and_an_owner_cannot_change_its_classes(api, tenant_a, owner_a, viewer_a):
    url = f"/api/v1/tenants/{tenant_a.pk}/"
    assert api("viewer_a").patch(url, {"name": "X"}, format="json").status_code == 403
    for field in ("max_priority_class", "default_priority_class"):
        assert api("owner_a").patch(url, {field: "production"}, format="json").status_code == 403
    assert api("owner_a").patch(url, {"name": "Alpha Renamed"}, format="json").status_code == 200
    tenant_a.refresh_from_db()
    assert (tenant_a.name, tenant_a.max_priority_class, tenant_a.default_priority_class) == ("Alpha Renamed", None, None)


def test_clusters_are_staff_only(api, owner_a):
    assert api("owner_a").get("/api/v1/clusters/").status_code == 403


def test_a_tenant_bound_token_sees_only_that_tenants_tokens(owner_a, tenant_a):
    issue_token(owner_a, name="personal-unbound")
    _, plaintext = issue_token(owner_a, tenant_a, name="alpha-bound")
    names = {t["name"] for t in bearer(plaintext).get("/api/v1/tokens/").json()["results"]}
    assert names == {"alpha-bound"}
