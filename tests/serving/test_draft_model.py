"""Speculative decoding with a draft model: the draft is a model of the catalog the tenant may use, fetched into the
pod like the service's own, and the engine gets its path through the one flag definition; a name a tenant typed
never reaches the engine (clean() refuses it, and so does the renderer for a row saved before)."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError

from apps.serving.rendering import render_service
from apps.serving.rendering.spec import spec_from_service
from tests.factories import InferenceServiceFactory, ModelFactory

pytestmark = pytest.mark.django_db


def _engine_pod(objects):
    return next(o for o in objects if o["kind"] == "Deployment"
                and o["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "engine"
                )["spec"]["template"]["spec"]


def _service(tenant, draft, **extra):
    return InferenceServiceFactory(tenant=tenant, engine_settings={
        "speculative_model": draft, "num_speculative_tokens": 4, **extra})


def _errors(service):
    with pytest.raises(ValidationError) as refused:
        service.full_clean()
    return refused.value.message_dict["engine_settings"]


def test_a_catalog_draft_model_is_fetched_and_given_to_the_engine_by_its_path(tenant_a):
    ModelFactory(name="llama-3-2-1b", source_uri="hf://meta-llama/Llama-3.2-1B-Instruct@main",
                 parameters_billions=1.24, layers=16, hidden_size=2048, kv_heads=8, head_dim=64)
    service = _service(tenant_a, "llama-3-2-1b")
    service.full_clean()
    pod = _engine_pod(render_service(spec_from_service(service)))
    fetch = next(c for c in pod["initContainers"] if c["name"] == "fetch-draft-model")
    assert "hf download meta-llama/Llama-3.2-1B-Instruct --revision main" in fetch["command"][2]
    args = pod["containers"][0]["args"]
    config = json.loads(args[args.index("--speculative-config") + 1])
    assert config == {"method": "draft_model", "model": "/models/Llama-3.2-1B-Instruct", "num_speculative_tokens": 4}


def test_a_draft_model_on_a_pvc_is_mounted_read_only_beside_the_model(tenant_a):
    ModelFactory(name="draft-on-pvc", source_uri="pvc://drafts/llama-1b", parameters_billions=1.24)
    service = _service(tenant_a, "draft-on-pvc")
    pod = _engine_pod(render_service(spec_from_service(service)))
    assert {"name": "draft-source", "persistentVolumeClaim": {"claimName": "drafts", "readOnly": True}} in pod["volumes"]
    args = pod["containers"][0]["args"]
    assert json.loads(args[args.index("--speculative-config") + 1])["model"] == "/draft-source/llama-1b"


def test_a_typed_name_another_tenants_model_or_the_model_itself_is_refused(tenant_a, tenant_b):
    assert _errors(_service(tenant_a, "org/my-own-draft")) == [
        "speculative_model: 'org/my-own-draft' is not a model of the catalog this tenant may use; name a "
        "platform-wide model or one of the tenant's own"]
    ModelFactory(name="b-private-draft", tenant=tenant_b)
    assert "is not a model of the catalog" in _errors(_service(tenant_a, "b-private-draft"))[0]
    service = _service(tenant_a, "x")
    service.engine_settings = {**service.engine_settings, "speculative_model": service.model.name}
    assert _errors(service) == ["speculative_model: the draft model must be another, smaller model"]


def test_a_row_saved_with_a_typed_name_is_not_rendered(tenant_a):
    service = _service(tenant_a, "org/my-own-draft")  # saved without clean(), as rows saved before this rule
    with pytest.raises(ValueError, match="'org/my-own-draft' is not a model of the catalog this tenant may use"):
        render_service(spec_from_service(service))

