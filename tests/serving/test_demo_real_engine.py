"""The demo's real-engine service: `seed_demo` creates acme/tiny-real on the tiny Llama `python -m kubesim
tiny-model` writes, with the two adapters `tiny-adapter` writes, placed on the cpu-real node and loading both
adapters at run time."""

from __future__ import annotations

import pytest

from apps.catalog.models import Model
from apps.serving.management.commands.seed_demo import TINY_ADAPTERS
from apps.serving.models import InferenceService
from apps.serving.rendering import render_service
from apps.serving.rendering.loras import run_time_adapters
from apps.serving.rendering.spec import spec_from_service
from kubesim.tinymodel import llama_config
from tests.serving.test_commands import seeded  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db


class _Tokens:
    def token_to_id(self, token: str) -> int:
        return 0


def test_the_catalogs_tiny_model_has_the_architecture_the_generator_writes(seeded):  # noqa: F811
    tiny = Model.objects.get(name="tiny-llama")
    config = llama_config(2, 128, 4096, _Tokens())  # tiny-model's defaults (python -m kubesim tiny-model --help)
    assert (tiny.source_uri, tiny.layers, tiny.hidden_size, tiny.attention_heads, tiny.kv_heads, tiny.head_dim,
            tiny.max_context) == ("local://tiny", config["num_hidden_layers"], config["hidden_size"],
                                  config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"],
                                  config["max_position_embeddings"])
    assert sorted(uri for _, uri, _ in TINY_ADAPTERS) == ["local://adapters/tiny-chat", "local://adapters/tiny-sql"]


def test_the_demos_real_engine_service_runs_on_the_cpu_real_node_with_both_adapters_at_run_time(seeded):  # noqa: F811
    service = InferenceService.objects.get(tenant__slug="acme", name="tiny-real")
    service.full_clean()
    spec = spec_from_service(service)
    assert run_time_adapters(spec) == {"tiny-chat": "/models/local/adapters/tiny-chat",
                                       "tiny-sql": "/models/local/adapters/tiny-sql"}
    [deployment] = [o for o in render_service(spec) if o["kind"] == "Deployment" and o["metadata"]["name"] == "tiny-real"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubesim.io/node-class": "cpu-real"}
    engine = pod["containers"][0]
    assert "nvidia.com/gpu" not in engine["resources"].get("limits", {})
    args = engine["args"]
    assert args[args.index("--model") + 1] == "/models/local/tiny"
    assert "--enable-lora" in args and "--lora-modules" not in args
    assert {"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"} in engine["env"]

