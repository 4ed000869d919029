"""Rendering both revisions during a canary: the new one as its own unit beside the stable one (labels carry the
revision; the stable selectors never match it), the router weighting requests between them, and the gateway's
HTTPRoute splitting between two InferencePools. Expected values worked out by hand from the golden specs."""

from __future__ import annotations

import dataclasses

from apps.rollouts.units import canary_replicas, with_canary
from apps.serving.names import CANARY_WEIGHTS_ANNOTATION, REVISION_LABEL
from apps.serving.rendering import render_service, service_objects
from tests.serving.golden.specs import SPECS


def golden(name, **changes):
    return dataclasses.replace(SPECS[name](), **{"has_gateway": False, **changes})


def named(objects, kind):
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def matches(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def arg(args, flag):
    return args[args.index(flag) + 1]


def test_canary_replicas_are_the_stable_pools_share_rounded_up_and_at_least_one():
    # 4 × 5 % = 0.2 → 1; 4 × 25 % = 1 → 1; 4 × 50 % = 2; 3 × 50 % = 1.5 → 2; 4 × 100 % = 4.
    assert [canary_replicas(4, 5), canary_replicas(4, 25), canary_replicas(4, 50), canary_replicas(3, 50),
            canary_replicas(4, 100)] == [1, 1, 2, 2, 4]


def test_the_new_revision_runs_as_its_own_deployment_beside_the_stable_one():
    stable = golden("standard-vllm")
    new = dataclasses.replace(stable, tag="v0.34.0")
    objects = render_service(with_canary(stable, new, revision=7, weight=5))
    deployments = named(objects, "Deployment")
    assert {"chat", "chat-r7", "chat-router"} <= set(deployments)
    old_pod = deployments["chat"]["spec"]["template"]
    new_pod = deployments["chat-r7"]["spec"]["template"]
    assert old_pod["spec"]["containers"][0]["image"] == "vllm/vllm-openai:v0.33.0"
    assert new_pod["spec"]["containers"][0]["image"] == "vllm/vllm-openai:v0.34.0"
    assert new_pod["metadata"]["labels"][REVISION_LABEL] == "7"
    assert REVISION_LABEL not in old_pod["metadata"]["labels"]
    # Each Deployment picks its own pods only, so neither adopts the other's.
    assert not matches(deployments["chat"]["spec"]["selector"]["matchLabels"], new_pod["metadata"]["labels"])
    assert not matches(deployments["chat-r7"]["spec"]["selector"]["matchLabels"], old_pod["metadata"]["labels"])
    # The golden standard spec has 2 replicas: at 5 % the canary gets ⌈0.1⌉ = 1.
    assert deployments["chat-r7"]["spec"]["replicas"] == 1
    # Everything of the canary carries the service uid, so pruning removes it once the rollout ends.
    assert {o["metadata"]["name"] for o in service_objects(objects)} >= {"chat-r7"}


def test_the_router_finds_both_revisions_and_sends_the_canary_its_weight():
    stable = golden("standard-vllm", routing="prefix_aware")
    objects = render_service(with_canary(stable, dataclasses.replace(stable, tag="v0.34.0"), revision=7, weight=25))
    deployments = named(objects, "Deployment")
    router_pod = deployments["chat-router"]["spec"]["template"]
    assert router_pod["metadata"]["annotations"][CANARY_WEIGHTS_ANNOTATION] == "7=25"
    wanted = dict(pair.split("=") for pair in arg(router_pod["spec"]["containers"][0]["args"],
                                                   "--k8s-label-selector").split(","))
    for name in ("chat", "chat-r7"):
        assert matches(wanted, deployments[name]["spec"]["template"]["metadata"]["labels"]), name


def test_a_round_robin_service_gets_a_router_for_the_rollout_and_loses_it_after():
    stable = golden("standard-vllm")
    assert "chat-router" not in named(render_service(stable), "Deployment")
    during = render_service(with_canary(stable, stable, revision=2, weight=50))
    assert "chat-router" in named(during, "Deployment")
    # The service's name now leads to the router, the engines behind `chat-engine`.
    assert named(during, "Service")["chat"]["spec"]["selector"]["app.kubernetes.io/component"] == "router"


def test_a_pd_service_rolls_out_as_a_whole_prefill_and_decode_pair():
    stable = golden("pd_disaggregated-vllm")
    objects = render_service(with_canary(stable, dataclasses.replace(stable, tag="v0.34.0"), revision=3, weight=5))
    deployments = named(objects, "Deployment")
    assert {"chat-prefill", "chat-decode", "chat-r3-prefill", "chat-r3-decode"} <= set(deployments)
    args = deployments["chat-router"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert arg(args, "--prefill-model-labels") == "chat-prefill,chat-r3-prefill"
    assert arg(args, "--decode-model-labels") == "chat-decode,chat-r3-decode"


def test_the_gateway_route_splits_between_two_inference_pools_by_weight():
    stable = golden("standard-vllm", has_gateway=True)
    objects = render_service(with_canary(stable, dataclasses.replace(stable, tag="v0.34.0"), revision=7, weight=5))
    pools = named(objects, "InferencePool")
    assert set(pools) == {"chat", "chat-r7"}
    assert pools["chat-r7"]["spec"]["selector"]["matchLabels"][REVISION_LABEL] == "7"
    assert pools["chat-r7"]["spec"]["endpointPickerRef"]["name"] == "chat-r7-epp"
    (route,) = named(objects, "HTTPRoute").values()
    refs = route["spec"]["rules"][0]["backendRefs"]
    assert [(r["name"], r["weight"]) for r in refs] == [("chat", 95), ("chat-r7", 5)]
    assert route["spec"]["rules"][0]["matches"][0]["path"]["value"] == "/acme/chat"
