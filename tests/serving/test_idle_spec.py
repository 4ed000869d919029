"""`when_idle` (delete, sleep, auto): bad values are refused through the API with the field and the reason and
write nothing; a service that may sleep renders vLLM's sleep mode (its flag and the endpoints' switch), or SGLang's
memory saver with the weights' CPU backup."""

from __future__ import annotations

import pytest

from apps.serving.models import InferenceService
from apps.serving.rendering import render_service
from apps.serving.rendering.spec import spec_from_service
from tests.serving.test_validation_rules import catalog, post  # noqa: F401 (a fixture)


def serverless(catalog, runtime="vllm", **autoscaling) -> dict:  # noqa: F811
    return {
        "tenant": "alpha", "name": "wake", "cluster": "sim", "model": catalog["model"].pk,
        "runtime": catalog[runtime].pk, "deployment_mode": "serverless",
        "autoscaling": {"autoscaler": "builtin", "targets": {"waiting_requests_per_replica": 4},
                        "scale_to_zero_after_seconds": 300, **autoscaling},
        "pools": [{"role": "engine", "replicas": 1, "min_replicas": 0, "max_replicas": 2, "gpus_per_replica": 1}],
    }


@pytest.fixture
def catalog_serverless(catalog):  # noqa: F811
    catalog["vllm"].supported_modes = ["standard", "serverless"]
    catalog["vllm"].save()
    catalog["sglang"].supported_modes = ["standard", "serverless"]
    catalog["sglang"].save()
    return catalog


REFUSALS = [
    ({"when_idle": "nap"}, "vllm", "when_idle must be one of delete, sleep, auto, not 'nap'."),
    ({"when_idle": "sleep", "sleep_level": 3}, "vllm",
     "sleep_level must be 1 (weights kept in host memory) or 2 (weights discarded), not 3."),
    ({"when_idle": "auto"}, "vllm", "wake_objective_seconds is needed when when_idle is auto: the rule picks the "
                                    "cheaper of sleeping and deleting that wakes within it."),
    ({"when_idle": "auto", "wake_objective_seconds": 0}, "vllm",
     "wake_objective_seconds must be a number of seconds above 0 and at most 3600."),
    ({"when_idle": "sleep", "sleep_level": 2}, "sglang",
     "sleep_level 2 needs a vLLM runtime: SGLang sleeps at level 1 only (its weights kept in host memory and resumed "
     "from there)."),
    ({"when_idle": "sleep", "autoscaler": "keda"}, "vllm",
     "when_idle sleep needs the builtin autoscaler: it is the one that puts replicas to sleep."),
]


@pytest.mark.parametrize(("autoscaling", "runtime", "reason"), REFUSALS)
def test_bad_idle_settings_are_refused_naming_the_field(api, owner_a, catalog_serverless, autoscaling, runtime,
                                                         reason):
    response = post(api("owner_a"), serverless(catalog_serverless, runtime, **autoscaling))
    assert response.status_code == 400
    assert reason in response.json()["autoscaling"]


def test_sleep_applies_to_serverless_services_only(api, owner_a, catalog_serverless):
    payload = serverless(catalog_serverless, when_idle="sleep")
    payload["deployment_mode"] = "standard"
    payload["autoscaling"].pop("scale_to_zero_after_seconds")
    payload["pools"][0]["min_replicas"] = 1
    response = post(api("owner_a"), payload)
    assert response.status_code == 400
    assert response.json()["autoscaling"] == [
        "when_idle applies to serverless services only (they are the ones that go idle)."]


def _engine(service_id: int) -> dict:
    objects = render_service(spec_from_service(InferenceService.objects.get(pk=service_id)))
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    return deployment["spec"]["template"]["spec"]["containers"][0]


def test_a_service_that_may_sleep_renders_sleep_mode_and_one_that_deletes_does_not(api, owner_a,
                                                                                  catalog_serverless):
    sleeping = api("owner_a").post("/api/v1/services/", serverless(catalog_serverless, when_idle="auto",
                                                                   wake_objective_seconds=10), format="json")
    assert sleeping.status_code == 201, sleeping.content
    container = _engine(sleeping.json()["id"])
    assert container["args"].count("--enable-sleep-mode") == 1
    assert {"name": "VLLM_SERVER_DEV_MODE", "value": "1"} in container["env"]

    payload = serverless(catalog_serverless)
    payload["name"] = "plain"
    deleting = api("owner_a").post("/api/v1/services/", payload, format="json")
    assert deleting.status_code == 201, deleting.content
    container = _engine(deleting.json()["id"])
    assert "--enable-sleep-mode" not in container["args"]
    assert "VLLM_SERVER_DEV_MODE" not in [e["name"] for e in container.get("env", [])]


def test_an_sglang_service_that_may_sleep_renders_the_memory_saver_with_a_cpu_backup(api, owner_a,
                                                                                     catalog_serverless):
    created = api("owner_a").post("/api/v1/services/", serverless(catalog_serverless, "sglang", when_idle="sleep"),
                                  format="json")
    assert created.status_code == 201, created.content
    args = _engine(created.json()["id"])["args"]
    assert args.count("--enable-memory-saver") == 1 and args.count("--enable-weights-cpu-backup") == 1
    assert "--enable-sleep-mode" not in args
    deleting = api("owner_a").post("/api/v1/services/", {**serverless(catalog_serverless, "sglang"), "name": "plain"},
                                   format="json")
    assert deleting.status_code == 201, deleting.content
    assert "--enable-memory-saver" not in _engine(deleting.json()["id"])["args"]
