"""A deployment-mode change of a canary service cannot run as a canary (the two revisions would need different
routers): it goes by rolling update, recorded as a rollout that says why, in the API and on the Rollout panel."""

from __future__ import annotations

from django.urls import reverse

from apps.rollouts.models import Rollout, StableRevision
from apps.rollouts.plan import desired_spec
from apps.serving.actions import save_service
from apps.serving.models import InferenceService
from apps.serving.rendering.spec import PoolSpec

REASON = ("The deployment mode changed (standard → pd_disaggregated): the two revisions cannot run side by side "
          "behind one router, so revision 2 replaces revision 1 by rolling update, without canary steps or analysis.")


def test_a_mode_change_goes_by_rolling_update_and_says_why(canary_service, owner_a, api, client, viewer_a):
    service = InferenceService.objects.get(pk=canary_service.pk)
    service.deployment_mode = "pd_disaggregated"
    save_service(service, pools=[PoolSpec("prefill", replicas=1, max_replicas=2),
                                 PoolSpec("decode", replicas=1, max_replicas=2)], adapters=[], actor=owner_a, via="api")
    spec = desired_spec(InferenceService.objects.get(pk=canary_service.pk))
    # The new revision alone, in its mode: no canary unit beside it.
    assert spec.canary is None and spec.mode == "pd_disaggregated"
    assert StableRevision.objects.get(service=canary_service).revision == 2
    (rollout,) = Rollout.objects.filter(service=canary_service)
    assert (rollout.from_revision, rollout.to_revision, rollout.phase, rollout.reason) == (
        1, 2, "rolling_update", REASON)
    assert rollout.finished_at is not None and not rollout.active
    # Rendering again records nothing more.
    desired_spec(InferenceService.objects.get(pk=canary_service.pk))
    assert Rollout.objects.filter(service=canary_service).count() == 1

    listed = api("owner_a").get(f"/api/v1/services/{canary_service.pk}/rollouts/").json()
    (row,) = listed["results"] if isinstance(listed, dict) else listed
    assert (row["phase"], row["reason"]) == ("rolling_update", REASON)
    assert [d["action"] for d in row["decisions"]] == ["rolling_update"]

    client.force_login(viewer_a)
    html = client.get(reverse("web:service", args=["alpha", "chat"])).content.decode()
    assert "Revision 1 → 2</strong>: <span class=\"badge\" id=\"rollout-phase\">Rolling update</span>." in html
    assert REASON in html
