"""A 403 names the caller's role and the roles that may: an operator refused an owner's change is told that
operators cannot make it, not that viewers read only; a viewer is told that viewers read only."""

from __future__ import annotations

import pytest

from apps.tenancy.models import Membership
from tests.factories import InferenceServiceFactory

pytestmark = pytest.mark.django_db

VIEWER_CHANGE = "Your role here is viewer, and viewers read only; to change this you need the owner or operator role."


def test_a_viewer_changing_or_deleting_a_service_is_told_viewers_read_only(api, tenant_a, viewer_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="chat")
    client = api("viewer_a")

    changed = client.patch(f"/api/v1/services/{service.pk}/", {"routing_policy": "session"}, format="json")
    deleted = client.delete(f"/api/v1/services/{service.pk}/")
    rollout = client.post(f"/api/v1/services/{service.pk}/rollout/pause/")

    assert (changed.status_code, changed.json()["detail"]) == (403, VIEWER_CHANGE)
    assert (deleted.status_code, deleted.json()["detail"]) == (
        403, "Your role here is viewer, and viewers read only; to delete this you need the owner or operator role.")
    assert (rollout.status_code, rollout.json()["detail"]) == (403, VIEWER_CHANGE)


def test_an_operator_changing_a_membership_is_told_operators_cannot_not_viewers_read_only(
        api, tenant_a, operator_a, viewer_a):
    membership = Membership.objects.get(user=viewer_a)

    response = api("operator_a").patch(f"/api/v1/memberships/{membership.pk}/", {"role": "owner"}, format="json")

    assert response.status_code == 403
    assert response.json()["detail"] == \
        "Your role here is operator, and operators cannot change this; it needs the owner role."
    assert Membership.objects.get(pk=membership.pk).role == "viewer"


def test_a_viewer_starting_a_whatif_run_is_told_viewers_read_only(api, tenant_a, viewer_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="chat")

    response = api("viewer_a").post("/api/v1/whatif/", {"service": service.pk}, format="json")

    assert (response.status_code, response.json()["detail"]) == (403, VIEWER_CHANGE)
