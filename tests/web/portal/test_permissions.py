"""Every portal write, for every role: refused with 403 (and nothing written) without the right, accepted
with it; and every tenant-B URL is a 404 for a member of tenant A."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.core.choices import Role
from apps.core.models import AuditEntry
from apps.tenancy.models import Membership
from tests.factories import MembershipFactory, UserFactory, issue_token
from tests.web.portal.conftest import page_urls
from tests.web.portal.forms import service_post

WRITE, OWN = "write", "own"
ALLOWED = {"owner_a": {WRITE, OWN}, "operator_a": {WRITE}, "viewer_a": set(), "staff": {WRITE, OWN}}


@pytest.fixture
def world(service_a, catalog_a, owner_a, operator_a, viewer_a):
    newcomer = UserFactory(username="newcomer")
    extra = MembershipFactory(tenant=service_a.tenant, user=UserFactory(username="extra"), role=Role.VIEWER)
    operator_token, _ = issue_token(operator_a, service_a.tenant, name="op-token", expires_days=30)
    return {"service": service_a, **catalog_a, "newcomer": newcomer, "extra": extra,
            "operator_token": operator_token}


def actions(w, actor_user) -> list[tuple[str, str, str, dict]]:
    """(name, right needed, url, form data) of every write the portal offers in tenant alpha."""
    s = ["alpha", "chat"]
    own_token, _ = issue_token(actor_user, w["service"].tenant, name="mine", expires_days=7)
    return [
        ("create service", WRITE, reverse("web:service-create", args=["alpha"]),
         service_post(model=w["model"], runtime=w["runtime"])),
        ("edit service", WRITE, reverse("web:service-edit", args=s),
         service_post(name="", model=w["model"], runtime=w["runtime"], version=w["service"].version,
                      max_model_len=4096)),
        ("scale service", WRITE, reverse("web:service-scale", args=s),
         {"version": w["service"].version, "engine-replicas": 2, "engine-min_replicas": 1, "engine-max_replicas": 4}),
        ("delete service", WRITE, reverse("web:service-delete", args=s), {"confirm": "chat"}),
        ("send a prompt", WRITE, reverse("web:playground-stream", args=s), {"kind": "chat", "prompt": "hi"}),
        ("create token", WRITE, reverse("web:tokens", args=["alpha"]), {"name": "ci", "expires_days": 30}),
        ("revoke own token", WRITE, reverse("web:token-revoke", args=["alpha", own_token.pk]), {}),
        ("add member", OWN, reverse("web:members", args=["alpha"]), {"user": "newcomer", "role": "viewer"}),
        ("change role", OWN, reverse("web:member-change", args=["alpha", w["extra"].pk]),
         {"action": "role", "role": "operator"}),
        ("remove member", OWN, reverse("web:member-change", args=["alpha", w["extra"].pk]), {"action": "remove"}),
        ("create model", WRITE, reverse("web:catalog-create", args=["alpha", "models"]),
         {"name": "m2", "source_uri": "hf://org/m2", "parameters_billions": 1, "layers": 2, "hidden_size": 64,
          "attention_heads": 4, "kv_heads": 2, "head_dim": 16, "max_context": 4096, "dtype": "bfloat16"}),
        ("edit runtime", WRITE, reverse("web:catalog-edit", args=["alpha", "runtimes", w["private_runtime"].pk]),
         {"name": "alpha-vllm", "engine": "vllm", "image": "vllm/vllm-openai", "tag": "v0.34.0",
          "supported_modes": ["standard"]}),
        ("delete adapter", WRITE, reverse("web:catalog-delete", args=["alpha", "adapters", w["private_adapter"].pk]),
         {}),
    ]


@pytest.mark.parametrize("actor", ["owner_a", "operator_a", "viewer_a", "staff"])
def test_each_write_is_refused_with_403_exactly_for_roles_without_the_right(request, login, world, actor):
    user = request.getfixturevalue(actor)
    for name, needs, url, data in actions(world, user):
        audit_before = AuditEntry.objects.count()
        response = login(user).post(url, data)
        if needs in ALLOWED[actor]:
            assert response.status_code != 403, (actor, name)
            assert response.status_code < 500, (actor, name)
        else:
            assert response.status_code == 403, (actor, name, response.status_code)
            assert AuditEntry.objects.count() == audit_before, (actor, name)


def test_writers_actions_take_effect(login, world, owner_a):
    client = login(owner_a)
    for name, _, url, data in actions(world, owner_a):
        response = client.post(url, data)
        assert response.status_code in (200, 302, 422), (name, response.status_code)
    assert Membership.objects.filter(tenant__slug="alpha", user__username="newcomer").exists()
    assert not Membership.objects.filter(pk=world["extra"].pk).exists()
    world["service"].refresh_from_db()
    assert world["service"].is_deleting


def test_an_operator_cannot_revoke_another_members_token(login, world, operator_a, owner_a):
    owners_token, _ = issue_token(owner_a, world["service"].tenant, name="owners", expires_days=7)
    response = login(operator_a).post(reverse("web:token-revoke", args=["alpha", owners_token.pk]))
    owners_token.refresh_from_db()
    assert response.status_code == 404  # another member's token is not even listed for an operator
    assert owners_token.revoked_at is None


def test_every_tenant_b_url_is_404_for_a_member_of_tenant_a(login, world, owner_a, tenant_b, member_b):
    from tests.factories import InferenceServiceFactory, ModelFactory

    InferenceServiceFactory(tenant=tenant_b, name="secret", cluster=world["service"].cluster)
    entry = ModelFactory(tenant=tenant_b, name="bravo-model")
    token, _ = issue_token(member_b, tenant_b, name="b", expires_days=7)
    membership = Membership.objects.get(user=member_b, tenant=tenant_b)
    client = login(owner_a)
    urls = [*page_urls("bravo", "secret", token.pk, membership.pk, entry.pk), reverse("web:token-revoke", args=["bravo", token.pk]), reverse("web:member-change", args=["bravo", membership.pk]), reverse("web:catalog-delete", args=["bravo", "models", entry.pk]), reverse("web:service-form-parts", args=["bravo"]), reverse("web:playground-stream", args=["bravo", "secret"]),
            reverse("web:revision-rollback", args=["bravo", "secret", 1])]
    for url in urls:
        assert client.get(url).status_code == 404, url
        assert client.post(url, {"confirm": "secret", "action": "remove"}).status_code == 404, url
    # Tenant A's own URLs with tenant B's object ids are 404 too.
    assert client.post(reverse("web:token-revoke", args=["alpha", token.pk])).status_code == 404
    assert client.post(reverse("web:member-change", args=["alpha", membership.pk]),
                       {"action": "remove"}).status_code == 404
    assert client.get(reverse("web:catalog-edit", args=["alpha", "models", entry.pk])).status_code == 404
    assert client.get(reverse("web:switch") + "?tenant=bravo").status_code == 404
    assert Membership.objects.filter(pk=membership.pk).exists() and token.__class__.objects.get(
        pk=token.pk).revoked_at is None


def test_anonymous_users_are_sent_to_log_in(client, world):
    response = client.get(reverse("web:overview", args=["alpha"]))
    assert response.status_code == 302 and "/login/" in response["Location"]
    assert client.post(reverse("web:tokens", args=["alpha"]), {"name": "x", "expires_days": 7}).status_code == 302
