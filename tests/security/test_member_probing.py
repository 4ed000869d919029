"""Adding a member does not tell an owner which usernames exist: a missing user and one who may not be added
(a deactivated account) get the same answer, byte for byte, from the API."""

from __future__ import annotations

import pytest

from apps.tenancy.models import Membership
from tests.factories import UserFactory


@pytest.mark.parametrize("role", ["viewer", "emperor"])
def test_a_deactivated_user_is_answered_like_a_missing_one(api, owner_a, tenant_a, role):
    UserFactory(username="gone-away", is_active=False)
    client = api("owner_a")

    missing = client.post("/api/v1/memberships/", {"tenant": "alpha", "user": "never-was", "role": role},
                          format="json")
    deactivated = client.post("/api/v1/memberships/", {"tenant": "alpha", "user": "gone-away", "role": role},
                              format="json")

    assert missing.status_code == deactivated.status_code == 400
    # The names differ, so compare with each name put in the other's place.
    assert missing.content.replace(b"never-was", b"gone-away") == deactivated.content
    assert not Membership.objects.filter(user__username="gone-away").exists()


def test_the_missing_user_message_is_the_portals(api, owner_a, tenant_a):
    response = api("owner_a").post("/api/v1/memberships/", {"tenant": "alpha", "user": "never-was",
                                                            "role": "viewer"}, format="json")

    assert response.json()["user"] == ["No user 'never-was'; they need an account before they can be added."]


def test_an_active_user_is_added(api, owner_a, tenant_a):
    UserFactory(username="newcomer")

    response = api("owner_a").post("/api/v1/memberships/", {"tenant": "alpha", "user": "newcomer",
                                                            "role": "viewer"}, format="json")

    assert response.status_code == 201
