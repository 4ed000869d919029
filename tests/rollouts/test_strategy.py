"""Rollout strategies: `rolling` by default, `canary` steps validated by `clean()` through the API, the quota
counting both revisions of a canary at once, and a strategy change making no revision."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from apps.core.models import AuditEntry
from apps.serving.actions import save_service
from apps.serving.models import InferenceService, Revision
from apps.serving.rendering.spec import PoolSpec
from apps.tenancy.queues import set_gpu_quota
from tests.factories import ClusterFactory, ModelFactory, RuntimeFactory

CANARY = {"strategy": "canary", "steps": [{"weight": 5, "min_duration_seconds": 300},
                                           {"weight": 25, "min_duration_seconds": 600, "analysis": True},
                                           {"weight": 100}]}


@pytest.fixture
def service(tenant_a, owner_a):
    # 8 GPUs at max (4 replicas × 2 GPUs); tenant_a's quota is 64.
    new = InferenceService(tenant=tenant_a, name="chat", cluster=ClusterFactory(name="sim"),
                           model=ModelFactory(name="llama-8b"), runtime=RuntimeFactory(name="vllm", tag="v0.33.0"))
    return save_service(new, pools=[PoolSpec("engine", max_replicas=4, gpus_per_replica=2)], adapters=[],
                        actor=owner_a, via="api")


def url(service):
    return f"/api/v1/services/{service.pk}/"


def test_a_service_rolls_by_rolling_update_unless_told_otherwise(api, service):
    assert api("viewer_a").get(url(service)).json()["rollout"] == {"strategy": "rolling"}


def test_a_canary_strategy_is_stored_and_shown_as_sent_and_makes_no_revision(api, service):
    response = api("operator_a").patch(url(service), {"rollout": CANARY}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["rollout"] == CANARY
    service.refresh_from_db()
    assert service.rollout == CANARY
    # How a revision is rolled out is not what the pods run.
    assert list(Revision.objects.filter(service=service).values_list("number", flat=True)) == [1]
    assert AuditEntry.objects.filter(object_id=str(service.pk), action="update").count() == 1


@pytest.mark.parametrize(("steps", "words"), [
    ([{"weight": 25}, {"weight": 5}, {"weight": 100}], "weights must rise from step to step; got 25, 5, 100"),
    ([{"weight": 5}, {"weight": 5}, {"weight": 100}], "weights must rise from step to step; got 5, 5, 100"),
    ([{"weight": 5}, {"weight": 50}], "the last step must send 100 % to the new revision"),
    ([{"weight": 100}], "at least one step below 100"),
    ([{"weight": w} for w in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100)], "at most 10 steps; got 11"),
    ([{"weight": 0}, {"weight": 100}], "step 1's weight must be a whole percentage from 1 to 100; got 0"),
    ([{"weight": 5, "min_duration_seconds": 30}, {"weight": 100}],
     "step 1's must be a whole number of seconds from 60 to 86400; got 30"),
    ([{"weight": 5, "pause": True}, {"weight": 100}], "step 1 has unknown keys pause"),
    ([], "a canary needs a list of steps"),
], ids=["falling", "flat", "not-ending-at-100", "only-the-promotion", "eleven-steps", "zero-weight",
        "too-short", "unknown-key", "no-steps"])
def test_bad_canary_steps_are_refused_with_the_reason_and_change_nothing(api, service, steps, words):
    response = api("operator_a").patch(url(service), {"rollout": {"strategy": "canary", "steps": steps}},
                                       format="json")
    assert response.status_code == 400
    messages = response.json()["rollout"]
    assert any(words in m for m in messages), messages
    service.refresh_from_db()
    assert service.rollout == {"strategy": "rolling"}


@pytest.mark.parametrize(("extra", "words"), [
    ({"tolerance": 0}, "tolerance must be a number above 0 and at most 1"),
    ({"tolerance": 1.5}, "tolerance must be a number above 0 and at most 1"),
    ({"min_requests": 5}, "min_requests must be a whole number from 10 to 100000; got 5"),
    ({"when_exhausted": "ignore"}, "when_exhausted must be one of hold, roll_back; got 'ignore'"),
    ({"strategy": "blue_green"}, "strategy 'blue_green' is not one of rolling, canary"),
])
def test_bad_canary_settings_are_refused_by_name(api, service, extra, words):
    response = api("operator_a").patch(url(service), {"rollout": {**CANARY, **extra}}, format="json")
    assert response.status_code == 400
    assert any(words in m for m in response.json()["rollout"]), response.json()


def test_a_rolling_strategy_takes_no_steps(api, service):
    response = api("operator_a").patch(url(service), {"rollout": {"strategy": "rolling", "steps": []}}, format="json")
    assert response.status_code == 400
    assert response.json()["rollout"] == ["strategy: a rolling update takes no steps."]


def test_a_canary_that_cannot_fit_both_revisions_in_the_quota_is_refused_with_the_numbers(api, service, tenant_a):
    # The service needs 8 GPUs at max; a canary runs both revisions, 2 × 8 = 16. With a quota of 12 a rolling
    # update fits (8 ≤ 12) but the canary does not (16 > 12), and the message says how many are free.
    set_gpu_quota(tenant_a, 12)
    response = api("operator_a").patch(url(service), {"rollout": CANARY}, format="json")
    assert response.status_code == 400
    assert response.json()["rollout"] == [
        "strategy: a canary runs both revisions at once, which needs 2 × 8 = 16 GPUs at maximum replicas for tenant "
        "alpha; with 0 used by other services and 12 allowed, only 12 are free. Use the rolling strategy, or lower "
        "the pools' max_replicas."]
    # At 16 both fit exactly.
    set_gpu_quota(tenant_a, 16)
    assert api("operator_a").patch(url(service), {"rollout": CANARY}, format="json").status_code == 200


def test_a_serverless_service_cannot_roll_out_by_canary(api, tenant_a, owner_a):
    runtime = RuntimeFactory(name="vllm-sl", tag="v0.33.0")
    new = InferenceService(tenant=tenant_a, name="sl", cluster=ClusterFactory(name="sim2"),
                           model=ModelFactory(name="m"), runtime=runtime, deployment_mode="serverless",
                           rollout=CANARY)
    with pytest.raises(ValidationError) as caught:
        save_service(new, pools=[PoolSpec("engine", min_replicas=0, replicas=0, max_replicas=2)], adapters=[],
                     actor=owner_a, via="api")
    assert any("a serverless service rolls out by rolling update" in m for m in caught.value.message_dict["rollout"])
