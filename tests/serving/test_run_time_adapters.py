"""Which adapters stay out of the pod template (loaded at run time) and which stay in it."""

from dataclasses import replace

from apps.serving.rendering import render_service
from apps.serving.rendering.loras import run_time_adapters
from apps.serving.rendering.spec import AdapterSpec
from tests.serving.golden.specs import SPECS

HASH = "controlplane.io/pod-template-hash"
SQL = AdapterSpec("sql", "hf://acme/sql-lora", 16)
CHAT = AdapterSpec("chat", "hf://acme/chat-lora", 8)
PINNED = AdapterSpec("pinned", "hf://acme/pinned-lora@v2", 16)
S3 = AdapterSpec("fromsthree", "s3://adapters/lora", 16)


def _engine(spec):
    deployment = next(o for o in render_service(spec) if o["kind"] == "Deployment"
                      and o["metadata"]["name"] == spec.name)
    return deployment["spec"]["template"]


def test_adding_a_hugging_face_adapter_to_a_vllm_service_changes_no_pod_template():
    base = SPECS["standard-vllm"]()
    one, two = replace(base, adapters=(SQL,)), replace(base, adapters=(CHAT, SQL))
    assert _engine(one)["metadata"]["annotations"][HASH] == _engine(two)["metadata"]["annotations"][HASH]
    assert run_time_adapters(two) == {"chat": "acme/chat-lora", "sql": "acme/sql-lora"}
    container = _engine(two)["spec"]["containers"][0]
    assert "--lora-modules" not in container["args"]
    assert container["args"][container["args"].index("--max-loras") + 1] == "4"
    assert {"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"} in container["env"]
    assert not [c for c in _engine(two)["spec"].get("initContainers", []) if "adapter" in c["name"]]


def test_pinned_and_s3_adapters_and_sglang_stay_in_the_template():
    base = SPECS["standard-vllm"]()
    spec = replace(base, adapters=(S3, PINNED, SQL))
    args = _engine(spec)["spec"]["containers"][0]["args"]
    modules = args[args.index("--lora-modules") + 1:args.index("--max-lora-rank")]
    assert modules == ["fromsthree=/models/adapters/fromsthree", "pinned=/models/adapters/pinned"]
    assert args[args.index("--max-loras") + 1] == "6"  # two at start, four slots for run-time loads
    assert run_time_adapters(spec) == {"sql": "acme/sql-lora"}
    sglang = replace(SPECS["standard-sglang"](), adapters=(SQL,))
    assert run_time_adapters(sglang) == {}
    assert "sql=/models/adapters/sql" in _engine(sglang)["spec"]["containers"][0]["args"]
