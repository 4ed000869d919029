"""End to end: a canary service's runtime change through the API runs the new revision as its own Deployment
beside the stable one in kubesim (real Celery worker, official client), the router weighting it; promoting
through the API moves the stable Deployment to the new revision and removes the canary's."""

from __future__ import annotations

import pytest

from apps.rollouts.models import Rollout
from apps.serving.names import CANARY_WEIGHTS_ANNOTATION, REVISION_LABEL
from tests.factories import RuntimeFactory
from tests.workers.test_reconcile_e2e import create_service, service, stack, wait_for  # noqa: F401

pytestmark = pytest.mark.integration
NS = "tenant-acme"
CANARY = {"strategy": "canary", "steps": [{"weight": 5, "min_duration_seconds": 300}, {"weight": 100}]}


def deployments(handles) -> dict:
    return {d.metadata.name: d for d in handles["apps"].list_namespaced_deployment(NS).items}


def image(deployment) -> str:
    return deployment.spec.template.spec.containers[0].image


def test_a_canary_runs_beside_the_stable_deployment_and_promotion_replaces_it(stack):  # noqa: F811
    stack["workers"](1)
    pk = create_service(stack, rollout=CANARY)["id"]
    wait_for(lambda: service(pk).phase == "Ready", what="phase Ready")
    new = RuntimeFactory(name="vllm-new", tag="v0.34.0")
    response = stack["api"].patch(f"/api/v1/services/{pk}/", {"runtime": new.pk}, format="json")
    assert response.status_code == 200, response.content

    wait_for(lambda: {"chat", "chat-r2", "chat-router"} <= set(deployments(stack)), what="the canary unit")
    found = deployments(stack)
    assert image(found["chat"]) == "vllm/vllm-openai:v0.33.0"
    assert image(found["chat-r2"]) == "vllm/vllm-openai:v0.34.0"
    assert found["chat-r2"].spec.template.metadata.labels[REVISION_LABEL] == "2"
    assert found["chat-router"].spec.template.metadata.annotations[CANARY_WEIGHTS_ANNOTATION] == "2=5"
    assert Rollout.objects.get(service_id=pk).phase == "running"

    assert stack["api"].post(f"/api/v1/services/{pk}/rollout/promote/").status_code == 200
    wait_for(lambda: "chat-r2" not in deployments(stack)
             and image(deployments(stack)["chat"]) == "vllm/vllm-openai:v0.34.0", timeout=180,
             what="the stable Deployment on revision 2 and the canary's gone")
    # A round-robin service needs its router only while the rollout splits the requests.
    wait_for(lambda: "chat-router" not in deployments(stack), what="the rollout's router gone")
