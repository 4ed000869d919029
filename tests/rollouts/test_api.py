"""The rollouts API: a service's rollouts with their decisions, and pause / resume / promote now / abort, audited,
tenant-scoped, 403 for viewers and 409 when the rollout's state does not allow the action."""

from __future__ import annotations

from apps.core.models import AuditEntry
from apps.rollouts.models import Rollout, StableRevision
from apps.rollouts.plan import desired_spec
from apps.serving.models import InferenceService


def url(service, suffix):
    return f"/api/v1/services/{service.pk}/{suffix}"


def test_members_read_the_rollouts_with_their_decisions_and_others_get_404(api, canary_service, new_runtime):
    new_runtime()
    body = api("viewer_a").get(url(canary_service, "rollouts/")).json()
    assert [(r["from_revision"], r["to_revision"], r["phase"], r["weight"]) for r in body] == [(1, 2, "running", 5)]
    assert [d["action"] for d in body[0]["decisions"]] == ["start"]
    assert api("member_b").get(url(canary_service, "rollouts/")).status_code == 404
    assert api("member_b").post(url(canary_service, "rollout/pause/")).status_code == 404


def test_pause_and_resume_are_audited_and_kept_on_the_timeline(api, canary_service, new_runtime):
    new_runtime()
    client = api("operator_a")
    response = client.post(url(canary_service, "rollout/pause/"))
    assert response.status_code == 200, response.json()
    assert response.json()["phase"] == "paused"
    assert response.json()["decisions"][0]["reason"] == "Paused by oscar-operator at 5 %."
    # Pausing twice is refused and changes nothing.
    again = client.post(url(canary_service, "rollout/pause/"))
    assert again.status_code == 409
    assert "paused already" in again.json()["detail"]
    resumed = client.post(url(canary_service, "rollout/resume/")).json()
    assert resumed["phase"] == "running"
    assert [d["action"] for d in resumed["decisions"]] == ["resume", "pause", "start"]
    rollout = Rollout.objects.get(service=canary_service)
    entries = AuditEntry.objects.filter(object_id=str(rollout.pk), content_type__model="rollout")
    assert [(e.actor_repr, e.before["phase"], e.after["phase"]) for e in entries.order_by("id")] == [
        ("oscar-operator", "running", "paused"), ("oscar-operator", "paused", "running")]


def test_viewers_cannot_act_on_a_rollout(api, canary_service, new_runtime):
    new_runtime()
    assert api("viewer_a").post(url(canary_service, "rollout/abort/")).status_code == 403
    assert Rollout.objects.get(service=canary_service).phase == "running"


def test_promote_now_makes_the_canary_stable(api, canary_service, new_runtime):
    new_runtime()
    body = api("operator_a").post(url(canary_service, "rollout/promote/")).json()
    assert body["phase"] == "promoted"
    assert StableRevision.objects.get(service=canary_service).revision == 2
    assert desired_spec(canary_service).canary is None
    assert api("operator_a").post(url(canary_service, "rollout/promote/")).status_code == 409


def test_abort_goes_back_to_the_stable_revision(api, canary_service, new_runtime):
    new_runtime()
    body = api("operator_a").post(url(canary_service, "rollout/abort/")).json()
    assert body["phase"] == "aborted"
    service = InferenceService.objects.get(pk=canary_service.pk)
    assert service.runtime.tag == "v0.33.0"
    assert service.revisions.order_by("-number").first().restored_from == 1
    assert desired_spec(service).canary is None


def test_no_rollout_running_is_a_409_and_unknown_actions_a_404(api, canary_service):
    response = api("operator_a").post(url(canary_service, "rollout/pause/"))
    assert response.status_code == 409
    assert "has no rollout running" in response.json()["detail"]
    assert api("operator_a").post(url(canary_service, "rollout/skip/")).status_code == 404
