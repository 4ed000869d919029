"""The autoscaling policy through the services API (validated by the shared clean(), defaults written out),
manual scales of an autoscaled service (409 naming the autoscaler), and the decisions endpoint."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.autoscaling.models import ScalingDecision
from apps.serving.models import InferenceService, Pool
from tests.factories import ClusterFactory, InferenceServiceFactory, ModelFactory, RuntimeFactory


@pytest.fixture
def payload(tenant_a):
    ClusterFactory(name="sim")
    return {
        "tenant": "alpha", "name": "chat", "cluster": "sim", "model": ModelFactory(name="llama-8b").pk,
        "runtime": RuntimeFactory(name="vllm").pk, "deployment_mode": "pd_disaggregated",
        "autoscaling": {"autoscaler": "builtin",
                        "targets": {"waiting_requests_per_replica": 4, "kv_cache_usage": 0.8, "ttft_p95_seconds": 2}},
        "pools": [{"role": "prefill", "replicas": 1, "min_replicas": 1, "max_replicas": 4},
                  {"role": "decode", "replicas": 2, "min_replicas": 1, "max_replicas": 4}],
    }


def test_defaults_are_written_out_and_visible_in_the_api(api, owner_a, payload):
    response = api("owner_a").post("/api/v1/services/", payload, format="json")
    assert response.status_code == 201, response.content
    spec = response.json()["autoscaling"]
    # Kubernetes' default behavior (HPA docs, "Default Behavior").
    assert spec["behavior"] == {
        "scale_up": {"stabilization_window_s": 0, "select_policy": "Max",
                     "policies": [{"type": "Percent", "value": 100, "period_s": 15},
                                  {"type": "Pods", "value": 4, "period_s": 15}]},
        "scale_down": {"stabilization_window_s": 300, "select_policy": "Max",
                       "policies": [{"type": "Percent", "value": 100, "period_s": 15}]},
    }
    assert spec["tolerance"] == 0.1
    # Prefill and decode apart: prefill on waiting requests and TTFT, decode on KV usage.
    assert spec["pools"] == {
        "decode": {"targets": {"kv_cache_usage": 0.8}},
        "prefill": {"targets": {"waiting_requests_per_replica": 4, "ttft_p95_seconds": 2}},
    }
    assert api("owner_a").get(f"/api/v1/services/{response.json()['id']}/").json()["autoscaling"] == spec


@pytest.mark.parametrize(("change", "says"), [
    ({"scale_down_stabilization_seconds": 3601}, "scale_down_stabilization_seconds must be a whole number of "
                                                 "seconds from 0 to 3600"),
    ({"behavior": {"scale_up": {"stabilization_window_s": 7200}}}, "behavior.scale_up.stabilization_window_s"),
    ({"behavior": {"scale_down": {"policies": [{"type": "Percent", "value": 0, "period_s": 15}]}}},
     "behavior.scale_down.policies[0].value must be a whole number greater than 0"),
    ({"targets": {"waiting_requests_per_replica": 0}}, "targets.waiting_requests_per_replica must be a number "
                                                      "greater than 0"),
    ({"pools": {"router": {"targets": {}}}}, "'router' is not a pool role"),
    ({"pools": {"decode": {"targets": {"itl_p95_seconds": -1}}}}, "pools.decode.targets.itl_p95_seconds"),
    ({"tolerance": 2}, "tolerance must be a number from 0"),
])
def test_a_bad_policy_is_a_400_naming_autoscaling_and_writes_nothing(api, owner_a, payload, change, says):
    body = copy.deepcopy(payload)
    body["autoscaling"] |= change
    response = api("owner_a").post("/api/v1/services/", body, format="json")
    assert response.status_code == 400, response.content
    assert says in str(response.json()["autoscaling"])
    assert not InferenceService.objects.exists()


def test_min_zero_is_for_serverless_services_only(api, owner_a, payload):
    body = copy.deepcopy(payload)
    body["pools"][0]["min_replicas"] = 0
    response = api("owner_a").post("/api/v1/services/", body, format="json")
    assert response.status_code == 400
    assert "prefill.min_replicas: only serverless services scale to zero" in str(response.json()["pools"])


def test_tuning_keys_of_the_builtin_autoscaler_are_refused_for_others(api, owner_a, payload):
    body = copy.deepcopy(payload)
    body["autoscaling"] = {"autoscaler": "keda", "targets": {"waiting_requests_per_replica": 5}, "tolerance": 0.2}
    response = api("owner_a").post("/api/v1/services/", body, format="json")
    assert response.status_code == 400
    assert "tolerance apply to the builtin autoscaler only" in str(response.json()["autoscaling"])


def test_a_manual_scale_of_an_autoscaled_service_is_409_naming_the_autoscaler(api, owner_a, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, autoscaling={"autoscaler": "builtin", "targets": {
        "waiting_requests_per_replica": 4}}, pools=[{"role": "engine", "replicas": 2, "max_replicas": 4}])
    response = api("owner_a").post(f"/api/v1/services/{service.pk}/scale/", {"pool": "engine", "replicas": 3},
                                   format="json")
    assert response.status_code == 409
    assert "scaled by the builtin autoscaler" in response.json()["detail"]
    assert Pool.objects.get(service=service).replicas == 2


def test_a_spec_update_of_an_autoscaled_service_moves_bounds_and_keeps_replicas(api, owner_a, payload):
    created = api("owner_a").post("/api/v1/services/", payload, format="json").json()
    Pool.objects.filter(service_id=created["id"], role="decode").update(replicas=3)  # as the autoscaler left it
    pools = [{"role": "prefill", "replicas": 1, "min_replicas": 1, "max_replicas": 4},
             {"role": "decode", "replicas": 1, "min_replicas": 1, "max_replicas": 2}]
    response = api("owner_a").patch(f"/api/v1/services/{created['id']}/", {"pools": pools}, format="json")
    assert response.status_code == 200, response.content
    # The client sent 1 from an old read; the autoscaler's 3 is kept, within the new max 2.
    assert {p["role"]: p["replicas"] for p in response.json()["pools"]} == {"prefill": 1, "decode": 2}


def decision(service, minutes_ago, pool="engine"):
    return ScalingDecision.objects.create(
        service=service, pool=pool, time=timezone.now() - timedelta(minutes=minutes_ago), current_replicas=1,
        desired_replicas=2, raw_recommendation=2, stabilized=2, limited=2, rule="metric", action="scaled",
        reason=f"{minutes_ago} minutes ago")


@pytest.fixture
def decided(tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, deployment_mode="pd_disaggregated",
                                      pools=[{"role": "prefill"}, {"role": "decode"}])
    for minutes, pool in ((1, "prefill"), (5, "decode"), (30, "prefill")):
        decision(service, minutes, pool)
    return service


def test_decisions_are_listed_newest_first_and_filtered(api, owner_a, decided):
    url = f"/api/v1/services/{decided.pk}/decisions/"
    everything = api("owner_a").get(url).json()
    assert [d["reason"] for d in everything["results"]] == ["1 minutes ago", "5 minutes ago", "30 minutes ago"]
    recent = api("owner_a").get(url, {"since": "10m"}).json()
    assert [d["reason"] for d in recent["results"]] == ["1 minutes ago", "5 minutes ago"]
    older = api("owner_a").get(url, {"until": "3m", "pool": "prefill"}).json()
    assert [d["reason"] for d in older["results"]] == ["30 minutes ago"]
    assert api("owner_a").get(url, {"pool": "", "since": ""}).json()["count"] == 3  # empty = not given


@pytest.mark.parametrize(("params", "field"), [
    ({"since": "yesterday"}, "since"), ({"until": "-5"}, "until"), ({"since": "5m", "until": "10m"}, "since"),
    ({"pool": "engine"}, "pool"), ({"pol": "decode"}, "pol"),
])
def test_bad_decision_parameters_are_400_naming_the_parameter(api, owner_a, decided, params, field):
    response = api("owner_a").get(f"/api/v1/services/{decided.pk}/decisions/", params)
    assert response.status_code == 400
    assert field in response.json()


def test_another_tenants_decisions_are_404(api, member_b, decided):
    assert api("member_b").get(f"/api/v1/services/{decided.pk}/decisions/").status_code == 404
    assert api("anonymous").get(f"/api/v1/services/{decided.pk}/decisions/").status_code == 401


def test_a_partial_behavior_keeps_kubernetes_default_policies(api, owner_a, payload):
    body = copy.deepcopy(payload)
    body["autoscaling"]["behavior"] = {"scale_down": {"stabilization_window_s": 60}}
    response = api("owner_a").post("/api/v1/services/", body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["autoscaling"]["behavior"]["scale_down"] == {
        "stabilization_window_s": 60, "select_policy": "Max",
        "policies": [{"type": "Percent", "value": 100, "period_s": 15}]}
    assert response.json()["autoscaling"]["scale_down_stabilization_seconds"] == 60
