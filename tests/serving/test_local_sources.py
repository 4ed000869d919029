"""`local://path` sources: accepted in the catalog, read from the node's folder in the pod, loaded at run time by
vLLM, and refused for an SGLang runtime with the field named."""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.core.exceptions import ValidationError

from apps.catalog.validators import validate_source_uri
from apps.serving.rendering.loras import run_time_adapters
from apps.serving.rendering.spec import AdapterSpec
from tests.factories import AdapterFactory, ModelFactory, RuntimeFactory
from tests.serving.golden.specs import SPECS
from tests.serving.test_run_time_adapters import _engine as _pod
from tests.serving.test_validation_rules import post

HASH = "controlplane.io/pod-template-hash"
SQL = AdapterSpec("tiny-sql", "local://adapters/tiny-sql", 8)
CHAT = AdapterSpec("tiny-chat", "local://adapters/tiny-chat", 8)


@pytest.mark.parametrize("uri", ["local://tiny", "local://adapters/tiny-sql", "local://a_b/c-d/e.f"])
def test_local_sources_are_accepted(uri):
    validate_source_uri(uri)


@pytest.mark.parametrize("uri", ["local://", "local://../etc", "local://a/../b", "local:///abs", "local://a//b",
                                 "local://a b", "local://.hidden"])
def test_local_sources_outside_the_folder_are_refused(uri):
    with pytest.raises(ValidationError) as exc:
        validate_source_uri(uri)
    assert "local://path" in str(exc.value)


def test_a_local_model_and_adapters_are_read_from_the_nodes_folder_and_the_adapters_load_at_run_time():
    base = SPECS["standard-vllm"]()
    local = replace(base, model=replace(base.model, source_uri="local://tiny"))
    one, two = replace(local, adapters=(SQL,)), replace(local, adapters=(CHAT, SQL))
    assert _pod(one)["metadata"]["annotations"][HASH] == _pod(two)["metadata"]["annotations"][HASH]
    assert run_time_adapters(two) == {"tiny-chat": "/models/local/adapters/tiny-chat",
                                      "tiny-sql": "/models/local/adapters/tiny-sql"}
    pod = _pod(two)["spec"]
    engine = pod["containers"][0]
    args = engine["args"]
    assert args[args.index("--model") + 1] == "/models/local/tiny"
    assert "--lora-modules" not in args
    assert not [c for c in pod.get("initContainers", []) if c["name"].startswith("fetch")]
    assert {"name": "local-models", "mountPath": "/models/local", "readOnly": True} in engine["volumeMounts"]
    assert {"name": "local-models", "hostPath": {"path": "/var/lib/llm-models", "type": "Directory"}} \
        in pod["volumes"]


def test_a_hugging_face_model_with_no_local_source_mounts_no_node_folder():
    pod = _pod(replace(SPECS["standard-vllm"](), adapters=(AdapterSpec("sql", "hf://acme/sql-lora", 16),)))["spec"]
    assert not [v for v in pod["volumes"] if v["name"] == "local-models"]


@pytest.fixture
def sglang_catalog(tenant_a):
    model = ModelFactory(name="tiny", source_uri="local://tiny")
    return {"model": model, "adapter": AdapterFactory(base_model=model, name="tiny-sql",
                                                      source_uri="local://adapters/tiny-sql"),
            "vllm": RuntimeFactory(name="vllm"),
            "sglang": RuntimeFactory(name="sglang", engine="sglang", image="lmsysorg/sglang", tag="v0.5.23")}


def _payload(catalog, runtime, adapters):
    from tests.factories import ClusterFactory

    ClusterFactory(name="sim")
    return {"tenant": "alpha", "name": "tiny", "cluster": "sim", "model": catalog["model"].pk,
            "runtime": catalog[runtime].pk, "deployment_mode": "standard", "adapters": adapters,
            "pools": [{"role": "engine", "replicas": 1, "min_replicas": 1, "max_replicas": 1,
                       "gpus_per_replica": 1}]}


def test_an_sglang_service_refuses_local_sources_naming_the_fields(api, sglang_catalog, owner_a):
    response = post(api("owner_a"), _payload(sglang_catalog, "sglang", [sglang_catalog["adapter"].pk]))
    assert response.status_code == 400, response.content
    body = response.json()
    assert "Adapter 'tiny-sql' has a local:// source, which only vLLM runtimes read" in str(body["adapters"])
    assert "Model 'tiny' has a local:// source" in str(body["model"])


def test_a_vllm_service_takes_local_sources(api, sglang_catalog, owner_a):
    response = api("owner_a").post("/api/v1/services/", _payload(sglang_catalog, "vllm",
                                                                 [sglang_catalog["adapter"].pk]), format="json")
    assert response.status_code == 201, response.content


def test_the_catalog_api_takes_a_local_adapter_and_refuses_a_path_out_of_the_folder(api, tenant_a, owner_a):
    model = ModelFactory(tenant=tenant_a, name="tiny", source_uri="local://tiny")
    payload = {"tenant": "alpha", "name": "tiny-sql", "base_model": model.pk, "rank": 8,
               "source_uri": "local://adapters/tiny-sql"}
    assert api("owner_a").post("/api/v1/adapters/", payload, format="json").status_code == 201
    response = api("owner_a").post("/api/v1/adapters/", payload | {"name": "escape", "source_uri": "local://../x"},
                                   format="json")
    assert response.status_code == 400
    assert "local://../x is not a supported source URI" in str(response.json()["source_uri"])
