"""The engine-argument policy through the API: tenants are refused, older services are flagged, not broken."""

from __future__ import annotations

import pytest

from apps.serving.models import InferenceService
from tests.serving.test_capacity_admission import body, catalog, post  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db


def test_a_tenant_may_not_ask_for_remote_code(post, catalog):  # noqa: F811
    response = post(body(catalog, gpu_type="h100-sxm-80gb", max_model_len=8192,
                         extra_args=["--trust-remote-code"]))
    assert response.status_code == 400
    assert response.json()["engine_settings"] == [
        "extra_args: --trust-remote-code is platform-only (it runs the model repository's own Python code); "
        "ask staff for a Runtime that sets it"]
    assert not InferenceService.objects.exists()


def test_a_service_saved_before_the_policy_is_flagged_and_stays_editable(post, catalog, api):  # noqa: F811
    response = post(body(catalog, gpu_type="h100-sxm-80gb", max_model_len=8192, extra_args=["--seed", "1"]))
    assert response.status_code == 201, response.content
    # What an older release accepted and stored, written as it was written then (no validation).
    old = {"max_model_len": 8192, "extra_args": ["--served-model=x", "--seed", "1"]}
    InferenceService.objects.filter(pk=response.json()["id"]).update(engine_settings=old)
    client = api("owner_a")
    url = f"/api/v1/services/{response.json()['id']}/"
    shown = client.get(url).json()
    assert shown["warnings"] == [
        "Engine arguments now refused: --served-model (--served-model-name) is set by the control plane"]
    edited = client.patch(url, {"routing_policy": "prefix_aware"}, format="json")
    assert edited.status_code == 200, edited.content
    changed = client.patch(url, {"engine_settings": {**old, "extra_args": ["--served-model=y"]}}, format="json")
    assert changed.status_code == 400
    assert "--served-model (--served-model-name) is set by the control plane" in changed.json()["engine_settings"][0]
