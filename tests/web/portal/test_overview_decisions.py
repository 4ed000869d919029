"""The Overview's latest scaling decisions: the tenant's own only, with the reason and a link to the
service's Scaling panel, and an empty state that says what to do."""

from __future__ import annotations

from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from apps.autoscaling.models import ScalingDecision
from tests.factories import InferenceServiceFactory

BUILTIN = {"autoscaler": "builtin", "targets": {"waiting_requests_per_replica": 4}}


def decide(service, seconds_ago, reason, action="scaled", current=1, desired=3):
    return ScalingDecision.objects.create(
        service=service, pool="engine", time=timezone.now() - timedelta(seconds=seconds_ago),
        current_replicas=current, desired_replicas=desired, raw_recommendation=desired, stabilized=desired,
        limited=desired, rule="metric", action=action, reason=reason)


def test_the_overview_shows_the_tenant_s_decisions_with_reason_and_scaling_link(login, viewer_a, tenant_a, tenant_b):
    mine = InferenceServiceFactory(tenant=tenant_a, name="chat", autoscaling=BUILTIN)
    theirs = InferenceServiceFactory(tenant=tenant_b, name="bravo-secret", autoscaling=BUILTIN)
    decide(mine, 30, "waiting 14.2 per replica > target 4 (×3.55) → 4 replicas; limited by scale-up policy")
    decide(mine, 20, "held at 3 (scale-down stabilization)", action="held", current=3, desired=3)
    decide(mine, 10, "GPU quota: 8 of 8 used", action="blocked", current=3, desired=4)
    decide(theirs, 5, "bravo waiting 99 per replica")

    html = login(viewer_a).get(reverse("web:overview", args=["alpha"])).content.decode()
    listed = html.split('id="decisions"')[1].split("</ul>")[0]
    assert listed.count("<li>") == 2  # the held evaluation is folded into the Scaling panel's counts
    assert listed.index("GPU quota: 8 of 8 used") < listed.index("waiting 14.2 per replica &gt; target 4")
    assert "3 → 4 <strong>blocked</strong>" in listed and "1 → 3 <strong>scaled</strong>" in listed
    assert f'href="{reverse("web:service", args=["alpha", "chat"])}?tab=scaling#scaling"' in listed
    assert "bravo" not in html


def test_tenant_b_s_decisions_never_show_on_tenant_a_s_overview_fragment(login, viewer_a, tenant_a, tenant_b):
    theirs = InferenceServiceFactory(tenant=tenant_b, name="bravo-secret", autoscaling=BUILTIN)
    decide(theirs, 5, "bravo waiting 99 per replica")
    response = login(viewer_a).get(reverse("web:overview", args=["alpha"]), HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response.status_code == 200 and 'id="decisions"' not in html
    assert "bravo" not in html


def test_the_empty_state_says_how_to_turn_the_autoscaler_on(login, operator_a, viewer_a, tenant_a):
    InferenceServiceFactory(tenant=tenant_a, name="chat")
    html = login(operator_a).get(reverse("web:overview", args=["alpha"])).content.decode()
    assert "No service is scaled by the built-in autoscaler. To turn it on, open a service, choose" in html
    html = login(viewer_a).get(reverse("web:overview", args=["alpha"])).content.decode()
    assert "An operator or owner of alpha can turn it on" in html


def test_the_empty_state_of_an_autoscaled_tenant_says_decisions_are_coming(login, viewer_a, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="chat", autoscaling=BUILTIN)
    decide(service, 5, "held at 1", action="held", current=1, desired=1)
    html = login(viewer_a).get(reverse("web:overview", args=["alpha"])).content.decode()
    assert "No scaling changes yet. The built-in autoscaler evaluates" in html
