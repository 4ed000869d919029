"""Token expiry is required and capped by TOKEN_MAX_DAYS; only a token's owner or a tenant owner changes
it; tokens rotate (a new secret, the old one refused at once) through the API and a command."""

from __future__ import annotations

import secrets
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework.test import APIClient

from apps.core.models import AuditEntry
from apps.tenancy.models import ApiToken
from tests.factories import issue_token


def bearer(plaintext: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return client


def days_from_now(moment) -> float:
    if isinstance(moment, str):
        moment = parse_datetime(moment)
    return (moment - timezone.now()).total_seconds() / 86400


def test_a_token_created_without_expiry_expires_after_the_default_90_days(api, owner_a):
    body = api("owner_a").post("/api/v1/tokens/", {"name": "ci"}, format="json").json()

    assert 89.99 < days_from_now(body["expires_at"]) <= 90


def test_the_cap_follows_token_max_days(api, owner_a, settings):
    settings.TOKEN_MAX_DAYS = 7
    client = api("owner_a")

    default = client.post("/api/v1/tokens/", {"name": "short"}, format="json").json()
    too_long = client.post("/api/v1/tokens/", {"name": "long", "expires_at": timezone.now() + timedelta(days=8)},
                           format="json")

    assert 6.99 < days_from_now(default["expires_at"]) <= 7
    assert too_long.status_code == 400
    assert "7 days" in str(too_long.json()["expires_at"])


@pytest.mark.parametrize("expires_at", [None, "far"])
def test_creating_a_token_without_end_or_beyond_the_cap_is_400(api, owner_a, expires_at):
    if expires_at == "far":
        expires_at = (timezone.now() + timedelta(days=91)).isoformat()

    response = api("owner_a").post("/api/v1/tokens/", {"name": "forever", "expires_at": expires_at}, format="json")

    assert response.status_code == 400
    assert "expires_at" in response.json()
    assert not ApiToken.objects.filter(name="forever").exists()


@pytest.mark.parametrize("expires_at", [None, "far"])
def test_an_expiry_cannot_be_removed_or_stretched_past_the_cap(api, owner_a, expires_at):
    token, _ = issue_token(owner_a, expires_days=30)
    before = token.expires_at
    if expires_at == "far":
        # 90 days from when the secret was issued is the limit, however late the change comes.
        expires_at = (token.issued_at + timedelta(days=90, minutes=1)).isoformat()

    response = api("owner_a").patch(f"/api/v1/tokens/{token.pk}/", {"expires_at": expires_at}, format="json")

    assert response.status_code == 400
    assert "expires_at" in response.json()
    token.refresh_from_db()
    assert token.expires_at == before


def test_an_owner_may_shorten_their_tokens_life(api, owner_a):
    token, _ = issue_token(owner_a)
    sooner = timezone.now() + timedelta(days=3)

    response = api("owner_a").patch(f"/api/v1/tokens/{token.pk}/", {"expires_at": sooner.isoformat()}, format="json")

    assert response.status_code == 200
    token.refresh_from_db()
    assert abs((token.expires_at - sooner).total_seconds()) < 1


def test_an_operator_cannot_change_or_revoke_another_members_token(api, owner_a, operator_a, tenant_a):
    token, plaintext = issue_token(owner_a, tenant_a, name="owners-bot")
    client = api("operator_a")

    renamed = client.patch(f"/api/v1/tokens/{token.pk}/", {"name": "mine-now"}, format="json")
    revoked = client.patch(f"/api/v1/tokens/{token.pk}/", {"revoked": True}, format="json")
    deleted = client.delete(f"/api/v1/tokens/{token.pk}/")
    rotated = client.post(f"/api/v1/tokens/{token.pk}/rotate/", {}, format="json")

    assert (renamed.status_code, revoked.status_code, deleted.status_code, rotated.status_code) == (403,) * 4
    token.refresh_from_db()
    assert (token.name, token.revoked_at) == ("owners-bot", None)
    assert bearer(plaintext).get("/api/v1/services/").status_code == 200


def test_a_tenant_owner_may_revoke_an_operators_token(api, owner_a, operator_a, tenant_a):
    token, plaintext = issue_token(operator_a, tenant_a, name="operators-bot")

    response = api("owner_a").patch(f"/api/v1/tokens/{token.pk}/", {"revoked": True}, format="json")

    assert response.status_code == 200
    assert bearer(plaintext).get("/api/v1/services/").status_code == 401


def test_rotating_issues_a_new_secret_and_refuses_the_old_one(api, owner_a, tenant_a):
    token, old = issue_token(owner_a, tenant_a, name="deploy-bot", expires_days=2)

    response = api("owner_a").post(f"/api/v1/tokens/{token.pk}/rotate/", {}, format="json")

    assert response.status_code == 200
    body = response.json()
    new = body["token"]
    assert new != old
    assert (body["id"], body["name"], body["tenant"], body["prefix"]) == (token.pk, "deploy-bot", "alpha", new[:8])
    assert 89.99 < days_from_now(body["expires_at"]) <= 90
    assert bearer(old).get("/api/v1/services/").status_code == 401
    assert bearer(new).get("/api/v1/services/").status_code == 200
    entry = AuditEntry.objects.filter(object_id=str(token.pk), content_type__model="apitoken").latest("time")
    assert (entry.action, entry.before["key_hash"], entry.after["key_hash"]) == ("update", "<redacted>", "<redacted>")


def test_rotating_takes_a_shorter_expiry_but_not_one_past_the_cap(api, owner_a):
    token, _ = issue_token(owner_a)
    client = api("owner_a")

    too_long = client.post(f"/api/v1/tokens/{token.pk}/rotate/",
                           {"expires_at": (timezone.now() + timedelta(days=91)).isoformat()}, format="json")
    short = client.post(f"/api/v1/tokens/{token.pk}/rotate/",
                        {"expires_at": (timezone.now() + timedelta(days=1)).isoformat()}, format="json")

    assert too_long.status_code == 400
    assert "expires_at" in too_long.json()
    assert short.status_code == 200
    assert 0.99 < days_from_now(short.json()["expires_at"]) <= 1


def test_a_revoked_token_cannot_be_rotated(api, owner_a):
    token, _ = issue_token(owner_a)
    token.revoked_at = timezone.now()
    token.save()

    response = api("owner_a").post(f"/api/v1/tokens/{token.pk}/rotate/", {}, format="json")

    assert response.status_code == 409
    assert "revoked" in response.json()["detail"]


def test_another_tenants_token_cannot_be_rotated(api, owner_a, member_b, tenant_a):
    token, _ = issue_token(owner_a, tenant_a)

    assert api("member_b").post(f"/api/v1/tokens/{token.pk}/rotate/", {}, format="json").status_code == 404


def run(command: str, *args) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(command, *args, stdout=out, stderr=err)
    return out.getvalue().strip(), err.getvalue()


def test_issue_token_defaults_to_the_cap_and_refuses_more(owner_a, settings):
    settings.TOKEN_MAX_DAYS = 30
    plaintext, said = run("issue_token", "olivia-owner")

    token = ApiToken.objects.get(prefix=plaintext[:8])
    assert 29.99 < days_from_now(token.expires_at) <= 30
    assert "expires" in said
    with pytest.raises(CommandError, match="at most 30"):
        run("issue_token", "olivia-owner", "--expires-days", "31")


def test_rotate_token_command_prints_a_new_secret_once(owner_a):
    token, old = issue_token(owner_a, name="nightly")

    new, said = run("rotate_token", token.prefix)

    assert new != old
    assert bearer(old).get("/api/v1/services/").status_code == 401
    assert bearer(new).get("/api/v1/services/").status_code == 200
    assert "not shown again" in said
    entry = AuditEntry.objects.filter(object_id=str(token.pk), content_type__model="apitoken").latest("time")
    assert (entry.via, entry.action) == ("command", "update")


def test_a_secret_never_starts_with_a_dash_so_its_prefix_is_never_read_as_an_option(owner_a, monkeypatch):
    # token_urlsafe's alphabet holds "-": make it start every draw with one, as 1 in 64 draws do.
    draws = iter(["-" + "A" * 42, "-" + "B" * 42])
    monkeypatch.setattr(secrets, "token_urlsafe", lambda nbytes: next(draws))

    token, plaintext = issue_token(owner_a, name="dash")
    new, _ = run("rotate_token", token.prefix)

    assert not plaintext.startswith("-") and not new.startswith("-")
    assert new.endswith("-" + "B" * 42)
    assert bearer(new).get("/api/v1/services/").status_code == 200


@pytest.mark.parametrize(("args", "says"), [(["zzzzzzzz"], "No token"), (["--expires-days", "91", "PREFIX"], "at most")])
def test_rotate_token_command_refuses_clearly(owner_a, args, says):
    token, _ = issue_token(owner_a)
    args = [token.prefix if a == "PREFIX" else a for a in args]

    with pytest.raises(CommandError, match=says):
        run("rotate_token", *args)
