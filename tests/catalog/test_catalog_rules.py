"""Catalog rules: source URIs, architecture consistency, scoping, runtime default args."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from apps.catalog.models import Model
from apps.catalog.validators import validate_source_uri
from tests.factories import AdapterFactory, ModelFactory, RuntimeFactory


@pytest.mark.parametrize(
    "uri",
    [
        "hf://meta-llama/Llama-3.1-8B-Instruct",
        "hf://Qwen/Qwen3-8B@a1b2c3d",
        "hf://org/name@v1.0",
        "s3://models-bucket/llama/8b",
        "pvc://model-cache/llama-3.1-8b",
    ],
)
def test_supported_source_uris_pass(uri):
    validate_source_uri(uri)


@pytest.mark.parametrize(
    "uri",
    [
        "https://huggingface.co/meta-llama/x",
        "hf://only-org",
        "hf://org/name@",
        "s3://Bad_Bucket/key",
        "s3://bucket",
        "pvc://Claim/path",
        "file:///models/x",
        "",
    ],
)
def test_other_source_uris_are_rejected(uri):
    with pytest.raises(ValidationError):
        validate_source_uri(uri)


def test_kv_heads_must_divide_attention_heads(db):
    with pytest.raises(ValidationError) as exc:
        ModelFactory.build(attention_heads=32, kv_heads=6).full_clean()
    assert "kv_heads" in exc.value.message_dict


def test_platform_wide_names_are_unique_but_tenants_may_reuse_them(tenant_a):
    ModelFactory(name="llama")
    with pytest.raises(ValidationError) as exc:
        ModelFactory.build(name="llama").full_clean()
    assert exc.value.error_dict["name"][0].code == "unique"
    ModelFactory.build(name="llama", tenant=tenant_a).full_clean()


def test_a_private_adapter_cannot_sit_on_another_tenants_model(tenant_a, tenant_b):
    model_b = ModelFactory(tenant=tenant_b)
    with pytest.raises(ValidationError) as exc:
        AdapterFactory.build(tenant=tenant_a, base_model=model_b).full_clean()
    assert "base_model" in exc.value.message_dict


def test_runtime_default_args_may_not_repeat_an_owned_flag(db):
    with pytest.raises(ValidationError) as exc:
        RuntimeFactory.build(default_args=["--kv-cache-dtype", "fp8"]).full_clean()
    assert "default_args" in exc.value.message_dict
    RuntimeFactory.build(default_args=["--disable-fastapi-docs"]).full_clean()


def test_a_member_sees_platform_entries_and_their_tenants_only(owner_a, tenant_a, tenant_b):
    ModelFactory(name="shared")
    ModelFactory(name="alpha-own", tenant=tenant_a)
    ModelFactory(name="bravo-own", tenant=tenant_b)
    names = set(Model.objects.restrict(owner_a).values_list("name", flat=True))
    assert names == {"shared", "alpha-own"}


def test_a_name_clash_in_the_tenants_catalog_is_409_through_the_api(api, tenant_a, owner_a):
    ModelFactory(name="alpha-tuned", tenant=tenant_a)
    payload = {"tenant": "alpha", "name": "alpha-tuned", "source_uri": "s3://models/tuned",
               "parameters_billions": 8.03, "layers": 32, "hidden_size": 4096, "attention_heads": 32,
               "kv_heads": 8, "head_dim": 128, "max_context": 8192}
    response = api("owner_a").post("/api/v1/models/", payload, format="json")
    assert response.status_code == 409
    assert "already used" in str(response.json()["name"])


def test_remote_code_only_on_a_platform_wide_runtime(db, api, tenant_a, owner_a):
    # Platform-wide runtimes are written by staff only (and audited): they may allow remote code.
    RuntimeFactory.build(default_args=["--trust-remote-code", "--download-dir=/cache"]).full_clean()
    payload = {"tenant": "alpha", "name": "own-vllm", "engine": "vllm", "image": "docker.io/vllm/vllm-openai",
               "tag": "v0.33.0", "default_args": ["--trust-remote-code"], "supported_modes": ["standard"]}
    response = api("owner_a").post("/api/v1/runtimes/", payload, format="json")
    assert response.status_code == 400
    assert "--trust-remote-code is platform-only" in str(response.json()["default_args"])
