"""Rollouts in the admin: read-only, the decisions shown on the rollout's page."""

from __future__ import annotations

from django.test import Client
from django.urls import reverse

from apps.rollouts.models import Rollout


def test_a_rollouts_page_shows_its_decisions_and_cannot_be_changed(staff, canary_service, new_runtime):
    new_runtime()
    rollout = Rollout.objects.get(service=canary_service)
    client = Client()
    client.force_login(staff)
    page = client.get(reverse("admin:rollouts_rollout_change", args=[rollout.pk])).content.decode()
    assert "Revision 2 starts beside revision 1 with 5 % of the requests." in page
    assert 'name="_save"' not in page
    listing = client.get(reverse("admin:rollouts_rollout_changelist"), {"q": "chat"}).content.decode()
    assert "alpha/chat" in listing and "Running" in listing
