"""A vLLM service of a `local://` model is placed on kubesim's cpu-real nodes: the renderer writes their class's
node selector and toleration and one real engine's CPU and memory (no GPU), kubesim's scheduler puts the pod
there and its node admits it; what vLLM's CPU build cannot honour is refused at the API with the reason."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kubesim.cluster.nodes import build_nodes
from kubesim.cluster.placement import place
from kubesim.engines.real import admission_refusal
from tests.factories import ClusterFactory, ModelFactory, RuntimeFactory
from tests.serving.golden.specs import SPECS
from tests.serving.test_run_time_adapters import _engine as _pod
from tests.serving.test_validation_rules import post


def _local(name="standard-vllm"):
    base = SPECS[name]()
    return replace(base, model=replace(base.model, source_uri="local://tiny"))


def test_a_vllm_service_of_a_local_model_selects_and_tolerates_the_cpu_real_class_and_asks_no_gpu():
    pod = _pod(_local())["spec"]
    assert pod["nodeSelector"] == {"kubesim.io/node-class": "cpu-real"}
    assert pod["tolerations"] == [{"key": "kubesim.io/cpu-real", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["containers"][0]["resources"] == {"requests": {"cpu": "500m", "memory": "3584Mi"},
                                                 "limits": {"memory": "3584Mi"}}
    gpu = _pod(SPECS["standard-vllm"]())["spec"]  # the same service of a Hugging Face model stays on its GPUs
    assert gpu["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L4"}
    assert gpu["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_kubesims_scheduler_places_the_rendered_pod_on_a_cpu_real_node_which_admits_it():
    nodes = build_nodes("l4-24gb:1x1,cpu:1,cpu-real:1")
    pod = {"metadata": {"name": "tiny-0", "namespace": "t"}, "spec": _pod(_local())["spec"]}
    name = place(pod, nodes, {})
    node = next(n for n in nodes if n["metadata"]["name"] == name)
    assert node["metadata"]["labels"]["kubesim.io/node-class"] == "cpu-real"
    assert admission_refusal(pod, node) is None
    # The Hugging Face model's pod never lands there: it does not tolerate the class's taint.
    gpu_pod = {"metadata": {"name": "gpu-0", "namespace": "t"}, "spec": _pod(SPECS["standard-vllm"]())["spec"]}
    assert place(gpu_pod, nodes, {}) != name


@pytest.fixture
def tiny(tenant_a):
    ClusterFactory(name="sim")
    return {"model": ModelFactory(name="tiny", source_uri="local://tiny", max_context=2048).pk,
            "runtime": RuntimeFactory(name="vllm").pk}


def _payload(tiny, mode="standard", settings=None, pools=None):
    pool = {"role": "engine", "replicas": 1, "min_replicas": 1, "max_replicas": 1, "gpus_per_replica": 1}
    return {"tenant": "alpha", "name": "tiny", "cluster": "sim", "model": tiny["model"], "runtime": tiny["runtime"],
            "deployment_mode": mode, "engine_settings": settings or {"max_model_len": 512},
            "pools": pools or [pool]}


@pytest.mark.parametrize(("engine", "pools", "mode", "field", "says"), [
    ({"max_model_len": 512, "tensor_parallel_size": 2}, [{"gpus_per_replica": 2}], "standard", "engine_settings",
     "--tensor-parallel-size 2 is refused on cpu-real nodes, where this local:// model runs: a cpu-real node runs "
     "one engine process without tensor parallelism"),
    ({"max_model_len": 512, "kv_offload": {"backend": "native", "size_gib": 4}}, [{}], "standard", "engine_settings",
     "--kv-offloading-backend is refused on cpu-real nodes, where this local:// model runs: KV-cache offloading"),
    (None, [{"gpus_per_replica": 2}], "standard", "pools",
     "engine: --tensor-parallel-size 2 is refused on cpu-real nodes"),
    (None, [{"role": "prefill"}, {"role": "decode"}], "pd_disaggregated", "pools",
     "prefill: --kv-transfer-config is refused on cpu-real nodes, where this local:// model runs: KV transfer "
     "between engines (NIXL, P/D disaggregation) needs GPUs."),
])
def test_what_the_cpu_build_cannot_honour_is_refused_with_the_reason_and_nothing_is_written(
        api, tiny, owner_a, engine, pools, mode, field, says):
    base = {"role": "engine", "replicas": 1, "min_replicas": 1, "max_replicas": 1, "gpus_per_replica": 1}
    response = post(api("owner_a"), _payload(tiny, mode, engine, [base | p for p in pools]))
    assert response.status_code == 400, response.content
    assert says in str(response.json()[field])


def test_a_one_engine_service_of_the_local_model_is_admitted(api, tiny, owner_a):
    response = api("owner_a").post("/api/v1/services/", _payload(tiny), format="json")
    assert response.status_code == 201, response.content
