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


def test_the_admin_pauses_and_aborts_through_the_audited_actions_and_refuses_what_does_not_apply(
        staff, canary_service, new_runtime):
    from apps.core.models import AuditEntry

    new_runtime()
    rollout = Rollout.objects.get(service=canary_service)
    client = Client()
    client.force_login(staff)
    url = reverse("admin:rollouts_rollout_changelist")

    def do(action):
        return client.post(url, {"action": action, "_selected_action": [rollout.pk]}, follow=True).content.decode()

    assert "The rollout of alpha/chat: paused." in do("pause")
    rollout.refresh_from_db()
    assert rollout.phase == "paused"
    assert "is paused already" in do("pause")  # refused, nothing changed
    assert "The rollout of alpha/chat: aborted." in do("abort")
    rollout.refresh_from_db()
    assert rollout.phase == "aborted"
    assert list(rollout.decisions.order_by("time", "id").values_list("action", flat=True)) == [
        "start", "pause", "abort"]
    assert AuditEntry.objects.filter(content_type__model="rollout", via="admin").count() == 2
