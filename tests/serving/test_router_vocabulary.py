"""The routers' flags are one vocabulary (enginevocab/routers.py): the renderer writes only its flags and
choices, and kubesim's simulated routers parse what the renderer writes with parsers built from it."""

import dataclasses

import pytest

from apps.serving.rendering import RenderError, render_service
from apps.serving.rendering.routers import checked
from enginevocab import routers
from kubesim.engines.harness import pod_context
from kubesim.engines.router import router_workload
from tests.serving.golden.specs import SPECS

# (golden spec, routing, the router kind kubesim runs, the routing value its parser must read)
CASES = [
    ("standard-vllm", "session", "pstack-router", "session"),
    ("standard-vllm", "prefix_aware", "pstack-router", "prefixaware"),
    ("standard-vllm", "kv_aware", "pstack-router", "kvaware"),
    ("pd_disaggregated-vllm", None, "pstack-router", "disaggregated_prefill"),
    ("standard-sglang", "prefix_aware", "sglang-router", "cache_aware"),
    ("standard-sglang", "cache_aware", "sglang-router", "cache_aware"),
]


def _router_args(name: str, routing: str | None) -> list[str]:
    changes = {"has_gateway": False} | ({"routing": routing} if routing else {})
    objects = render_service(dataclasses.replace(SPECS[name](), **changes))
    (deployment,) = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-router")]
    return deployment["spec"]["template"]["spec"]["containers"][0]["args"]


@pytest.mark.parametrize("name,routing,kind,logic", CASES)
def test_kubesims_router_parses_every_rendered_router_line(name, routing, kind, logic):
    workload = router_workload(kind, _router_args(name, routing), pod_context("router:v1", []))
    read = workload.ns.routing_logic if kind == "pstack-router" else workload.ns.policy
    assert read == logic


def test_the_sglang_routers_metrics_port_is_the_vocabularys():
    args = _router_args("standard-sglang", "prefix_aware")
    assert args[args.index("--prometheus-port") + 1] == "29000"
    assert routers.SGLANG_METRICS_PORT == 29000


def test_the_renderer_refuses_a_flag_or_choice_outside_the_routers_vocabulary():
    with pytest.raises(RenderError, match="the router has no --routing-policy flag"):
        checked(["--routing-policy", "session"], routers.PSTACK_FLAGS)
    with pytest.raises(RenderError, match="--routing-logic must be one of roundrobin, session"):
        checked(["--routing-logic", "least_loaded"], routers.PSTACK_FLAGS)
    with pytest.raises(RenderError, match="--policy must be one of cache_aware"):
        checked(["--policy"], routers.SGLANG_ROUTER_FLAGS)
    assert checked(["--policy", "random", "--selector", "a=b"], routers.SGLANG_ROUTER_FLAGS) == [
        "--policy", "random", "--selector", "a=b"]


def test_a_static_pd_sglang_router_reads_one_url_per_decode_flag_and_a_url_and_port_per_prefill():
    ns = router_workload("sglang-router", ["--pd-disaggregation", "--prefill", "http://p:8000", "8998",
                                           "--decode", "http://d1:8000", "--decode", "http://d2:8000"],
                         pod_context("router:v1", [])).ns
    assert ns.prefill == [["http://p:8000", "8998"]]
    assert ns.decode == ["http://d1:8000", "http://d2:8000"]
