"""A crash-looping engine explains itself: a 70B admitted (before the capacity rules) on one L4, reconciled
against a kubesim process over HTTP; the Healthy condition carries the engine's own last error line, read
from the container's previous log through the API server, and the planner's explanation."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from apps.serving.models import InferenceService
from tests.factories import (
    ClusterFactory,
    InferenceServiceFactory,
    ModelFactory,
    RuntimeFactory,
    TenantFactory,
    UserFactory,
)
from tests.polling import wait_for

pytestmark = pytest.mark.django_db


def llama_70b():
    return ModelFactory(name="llama-3-1-70b-instruct", source_uri="hf://meta-llama/Llama-3.1-70B-Instruct",
                        parameters_billions=70.6, layers=80, hidden_size=8192, attention_heads=64, kv_heads=8)


def healthy(pk) -> dict:
    return next((c for c in InferenceService.objects.get(pk=pk).conditions if c["type"] == "Healthy"), {})


def test_a_70b_on_one_l4_crash_loops_and_its_healthy_condition_carries_the_oom_line(kubesim_url):
    from workers.reconcile import reconcile

    tenant = TenantFactory(slug="acme", gpu_quota=16)
    svc = InferenceServiceFactory(
        tenant=tenant, name="llama70-on-l4", model=llama_70b(), runtime=RuntimeFactory(name="vllm"),
        cluster=ClusterFactory(name="sim", api_url=kubesim_url, insecure_simulator=True),
        pools=[{"role": "engine", "gpu_type": "l4-24gb"}],
    )

    def explained():
        reconcile(svc.pk)
        return "engine exited:" in healthy(svc.pk).get("message", "")

    wait_for(explained, timeout=120, interval=0.5, message="the Healthy condition to carry the engine's error")
    condition = healthy(svc.pk)
    assert condition["status"] == "False" and condition["reason"] == "CrashLoop"
    message = condition["message"]
    assert "engine exited: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.64 GiB." in message
    # 70.6e9 x 2 B = 131.5 GiB of weights per GPU at TP 1, against the L4's 24 GiB.
    assert "capacity planner: weights need 131.5 GiB per GPU at TP 1; one L4 has 24 GiB" in message
    assert "needs ≥" in message

    # Admitted before the rules, it is flagged, not broken: the API shows why and still accepts other edits.
    api = APIClient()
    api.force_authenticate(UserFactory(username="root", is_staff=True, is_superuser=True))
    body = api.get(f"/api/v1/services/{svc.pk}/").json()
    assert any(w.startswith("Does not fit: engine: llama-3-1-70b-instruct does not fit 1 × L4") for w in body["warnings"])
    response = api.patch(f"/api/v1/services/{svc.pk}/", {"routing_policy": "session"}, format="json")
    assert response.status_code == 200, response.content
    # A change to what decides capacity is judged again, and refused with what would fit.
    response = api.patch(f"/api/v1/services/{svc.pk}/", {"engine_settings": {"max_model_len": 8192}}, format="json")
    assert response.status_code == 400
    assert "needs ≥ 8 × L4 (TP 8)" in str(response.json()["pools"])
