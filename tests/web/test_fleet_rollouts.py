"""The fleet page lists the canary rollouts under way that the user may see: service, revisions, step and
weight, state and reason; an ended rollout and another tenant's are not listed."""

from __future__ import annotations

from django.urls import reverse
from django.utils import timezone

from apps.rollouts.models import Rollout
from tests.factories import InferenceServiceFactory

STEPS = {"strategy": "canary", "steps": [{"weight": 5, "min_duration_seconds": 60},
                                         {"weight": 25, "min_duration_seconds": 60}, {"weight": 100}]}


def rollout(service, *, step: int, phase: str = "running", reason: str = "") -> Rollout:
    now = timezone.now()
    return Rollout.objects.create(service=service, from_revision=3, to_revision=4, phase=phase, strategy=STEPS,
                                  step=step, step_started_at=now, window_started_at=now, reason=reason)


def test_the_fleet_lists_rollouts_under_way_of_the_users_tenants(login, owner_a, tenant_a, tenant_b):
    rollout(InferenceServiceFactory(tenant=tenant_a, name="chat"), step=1, reason="Window 2 of step 2.")
    rollout(InferenceServiceFactory(tenant=tenant_a, name="done"), step=2, phase="promoted")
    rollout(InferenceServiceFactory(tenant=tenant_b, name="secret-b"), step=0)

    html = login(owner_a).get(reverse("web:home")).content.decode()
    card = html[html.index('id="rollouts-now"'):]
    card = card[:card.index("</section>")]

    assert "alpha/chat" in card and "3 → 4" in card
    assert "2 of 3, 25 % to the canary" in card and "Running" in card and "Window 2 of step 2." in card
    assert "done" not in card and "secret-b" not in card


def test_no_rollout_says_so(login, viewer_a):
    assert "No canary rollout is under way." in login(viewer_a).get(reverse("web:home")).content.decode()
