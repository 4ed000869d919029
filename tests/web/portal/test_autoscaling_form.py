"""The service form's autoscaling policy: saving it keeps what only the API sets (behavior rates, tolerance,
per-pool targets), its own inputs take effect where the builtin autoscaler reads them, and clean()'s
autoscaling errors land beside the inputs they are about."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.web.forms.services import form_values, sign_base
from tests.factories import ClusterFactory, ModelFactory, RuntimeFactory

CUSTOM_SCALE_DOWN = {"stabilization_window_s": 600, "select_policy": "Min",
                     "policies": [{"type": "Pods", "value": 1, "period_s": 60}]}


@pytest.fixture
def tuned(api, owner_a):
    """A prefill/decode service made through the API with a custom scale-down behavior, a tolerance and a
    decode target of its own."""
    ClusterFactory(name="sim")
    payload = {
        "tenant": "alpha", "name": "tuned", "cluster": "sim", "model": ModelFactory(name="llama-8b").pk,
        "runtime": RuntimeFactory(name="vllm").pk, "deployment_mode": "pd_disaggregated",
        "autoscaling": {"autoscaler": "builtin", "tolerance": 0.2,
                        "targets": {"waiting_requests_per_replica": 4, "ttft_p95_seconds": 2},
                        "behavior": {"scale_down": CUSTOM_SCALE_DOWN},
                        "pools": {"decode": {"targets": {"running_requests_per_replica": 16}}}},
        "pools": [{"role": "prefill", "replicas": 1, "min_replicas": 1, "max_replicas": 4},
                  {"role": "decode", "replicas": 1, "min_replicas": 1, "max_replicas": 4}],
    }
    response = api("owner_a").post("/api/v1/services/", payload, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def edit_post(login, user, service_id, **changes):
    """Open the edit form and post what it shows with `changes` applied, as a browser would."""
    from apps.serving.models import InferenceService

    client = login(user)
    service = InferenceService.objects.get(pk=service_id)
    assert client.get(reverse("web:service-edit", args=["alpha", service.name])).status_code == 200
    data = form_values(service) | {"version": str(service.version), "base": sign_base(service)} | changes
    return client.post(reverse("web:service-edit", args=["alpha", service.name]), data)


def test_saving_the_form_keeps_the_behavior_tolerance_and_pool_targets_set_through_the_api(api, login, owner_a,
                                                                                          tuned):
    response = edit_post(login, owner_a, tuned["id"], enable_prefix_caching="true")
    assert response.status_code == 302, response.context and response.context["form"].errors

    spec = api("owner_a").get(f"/api/v1/services/{tuned['id']}/").json()["autoscaling"]
    assert spec["behavior"]["scale_down"] == CUSTOM_SCALE_DOWN
    assert spec["tolerance"] == 0.2
    assert spec["pools"]["decode"] == {"targets": {"running_requests_per_replica": 16}}
    assert spec["pools"]["prefill"] == {"targets": {"waiting_requests_per_replica": 4, "ttft_p95_seconds": 2}}
    assert spec["targets"] == {"waiting_requests_per_replica": 4, "ttft_p95_seconds": 2}


def test_the_form_s_window_and_targets_take_effect_and_custom_settings_stay(api, login, owner_a, tuned):
    response = edit_post(login, owner_a, tuned["id"], scale_down_stabilization_seconds="120",
                         target_waiting_requests_per_replica="6")
    assert response.status_code == 302, response.context and response.context["form"].errors

    spec = api("owner_a").get(f"/api/v1/services/{tuned['id']}/").json()["autoscaling"]
    # The new window is the one the builtin autoscaler reads; the custom rate and select policy stay.
    assert spec["behavior"]["scale_down"] == {**CUSTOM_SCALE_DOWN, "stabilization_window_s": 120}
    assert spec["scale_down_stabilization_seconds"] == 120
    # prefill's targets were derived from the service's, so they follow the new waiting target;
    # decode's own target was set on purpose and stays.
    assert spec["pools"]["prefill"] == {"targets": {"waiting_requests_per_replica": 6, "ttft_p95_seconds": 2}}
    assert spec["pools"]["decode"] == {"targets": {"running_requests_per_replica": 16}}
    assert spec["tolerance"] == 0.2


def test_the_form_lists_the_settings_it_keeps(login, owner_a, tuned):
    html = login(owner_a).get(reverse("web:service-edit", args=["alpha", "tuned"])).content.decode()
    kept = html.split('id="autoscaling-kept"')[1].split("</div>")[0]
    assert "tolerance 0.2" in kept
    assert "scale-down: Min of Pods 1 per 60 s" in kept
    assert "decode pool targets: running requests per replica 16" in kept


def test_switching_to_keda_drops_only_the_builtin_tuning(api, login, owner_a, tuned):
    response = edit_post(login, owner_a, tuned["id"], autoscaler="keda")
    assert response.status_code == 302, response.context and response.context["form"].errors
    spec = api("owner_a").get(f"/api/v1/services/{tuned['id']}/").json()["autoscaling"]
    assert spec["autoscaler"] == "keda"
    assert spec["targets"] == {"waiting_requests_per_replica": 4, "ttft_p95_seconds": 2}
    assert not {"behavior", "tolerance", "pools"} & set(spec)


@pytest.mark.parametrize(("changes", "field", "says"), [
    ({"target_kv_cache_usage": "1.5"}, "target_kv_cache_usage", "targets.kv_cache_usage must be a number in (0, 1]"),
    ({"scale_down_stabilization_seconds": "7200"}, "scale_down_stabilization_seconds",
     "scale_down_stabilization_seconds must be a whole number of seconds from 0 to 3600"),
    ({"scale_to_zero_after_seconds": "300"}, "scale_to_zero_after_seconds",
     "scale_to_zero_after_seconds applies to serverless services only"),
])
def test_bad_autoscaling_input_gets_clean_s_error_beside_the_input_and_writes_nothing(api, login, owner_a, tuned,
                                                                                      changes, field, says):
    before = api("owner_a").get(f"/api/v1/services/{tuned['id']}/").json()
    response = edit_post(login, owner_a, tuned["id"], **changes)
    assert response.status_code == 422
    assert says in response.context["form"].errors[field][0]
    assert 'aria-invalid="true"' in response.content.decode()
    assert api("owner_a").get(f"/api/v1/services/{tuned['id']}/").json() == before


def test_a_builtin_autoscaler_without_targets_is_refused_above_the_fieldset(login, owner_a, tuned):
    response = edit_post(login, owner_a, tuned["id"], target_waiting_requests_per_replica="",
                         target_ttft_p95_seconds="")
    assert response.status_code == 422
    assert "The builtin autoscaler needs at least one target." in response.context["group_errors"]["autoscaling"]
