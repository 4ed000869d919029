"""A tenant always keeps an owner: the model refuses to demote or remove the last one, so the API, the
admin and the portal all refuse it."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from apps.core.choices import Role
from apps.tenancy.models import Membership


def test_the_model_refuses_to_demote_the_last_owner(owner_a):
    membership = Membership.objects.get(user=owner_a)
    membership.role = Role.OPERATOR
    with pytest.raises(ValidationError) as caught:
        membership.full_clean()
    assert "last owner" in caught.value.message_dict["role"][0]


def test_the_model_refuses_to_delete_the_last_owner(owner_a):
    membership = Membership.objects.get(user=owner_a)
    with pytest.raises(ValidationError):
        membership.delete()
    assert Membership.objects.filter(pk=membership.pk).exists()


def test_an_owner_may_go_when_another_owner_stays(owner_a, operator_a):
    Membership.objects.filter(user=operator_a).update(role=Role.OWNER)
    membership = Membership.objects.get(user=owner_a)
    membership.role = Role.VIEWER
    membership.full_clean()
    membership.save()
    Membership.objects.get(user=owner_a).delete()
    assert not Membership.objects.filter(user=owner_a).exists()


def test_the_api_refuses_demoting_and_removing_the_last_owner(api, owner_a):
    membership = Membership.objects.get(user=owner_a)
    client = api("owner_a")
    demote = client.patch(f"/api/v1/memberships/{membership.pk}/", {"role": "viewer"}, format="json")
    assert demote.status_code == 400 and "last owner" in demote.json()["role"][0]
    remove = client.delete(f"/api/v1/memberships/{membership.pk}/")
    assert remove.status_code == 400 and "last owner" in remove.json()["role"][0]
    membership.refresh_from_db()
    assert membership.role == Role.OWNER


def test_the_admin_refuses_removing_the_last_owner(client, staff, owner_a):
    from tests.factories import PASSWORD

    membership = Membership.objects.get(user=owner_a)
    client.login(username=staff.username, password=PASSWORD)
    page = client.post(f"/admin/tenancy/membership/{membership.pk}/delete/", {"post": "yes"})
    assert page.status_code == 403
    assert Membership.objects.filter(pk=membership.pk).exists()
    change = client.post(f"/admin/tenancy/membership/{membership.pk}/change/",
                         {"user": owner_a.pk, "tenant": membership.tenant_id, "role": "viewer"})
    assert change.status_code == 200 and "last owner" in change.content.decode()
    membership.refresh_from_db()
    assert membership.role == Role.OWNER
