"""Routing policies in the lab: an alternative may change the service's routing policy, and each scenario routes
as the service would (a service without a router is balanced by the gateway by least outstanding requests; a
routing policy by its router, kubesim's router policies).

Hand arithmetic (Llama 3.1 8B on one L4, the engine model's defaults): the KV pool holds 3,262 blocks of 16 tokens.
Ten sessions each repeat one 7,000-token prompt (437 full blocks), one request every 3 s in turn: five sessions'
prompts fit one pool (2,185 blocks), ten do not (4,370). A prompt computed anew takes about 2.1 s to its first
token (2 x 8.03e9 FLOPs a token and the attention at 60.5 TFLOP/s, in 2,048-token steps); one found cached computes
its last 8 tokens in one weight-bound step of about 80 ms. A request (4 tokens out) is done in about 2.4 s, before
the next arrives.
"""

from __future__ import annotations

import pytest

from apps.whatif.lab import Load, build_scenarios, run_whatif
from apps.whatif.scenarios import ScenarioError
from capacity.traces import TraceRequest
from tests.factories import InferenceServiceFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def service():
    return InferenceServiceFactory(
        tenant__slug="alpha", name="chat",
        pools=[{"role": "engine", "replicas": 2, "min_replicas": 2, "max_replicas": 2, "gpu_type": "l4-24gb"}],
        engine_settings={"max_model_len": 8192})


def sessions_in_turn(rounds: int = 5, sessions: int = 10) -> Load:
    # The measured hit rate 1.0 makes every prompt its session's prefix, whole (the lab's share is capped at 1).
    requests = [TraceRequest(3.0 * (r * sessions + s), 7000, 4, f"user-{s}") for r in range(rounds)
                for s in range(sessions)]
    return Load("sessions", requests, 1.0)


def test_session_affinity_keeps_each_replicas_prefixes_where_least_outstanding_thrashes(service):
    result = run_whatif(service, sessions_in_turn(), [{"name": "sticky", "routing_policy": "session"}])
    current, sticky = result["scenarios"]
    # Least outstanding: both replicas idle at every arrival, so all go to the first; ten prompts cycle through a
    # pool that holds about seven, so each is evicted before its session comes back: every request computes it.
    assert current["ttft_p50_s"] == pytest.approx(2.1, abs=0.15)
    # Sessions hashed to replicas (rendezvous, as the router does): five each, which fit, so only each session's
    # first request computes its prompt: 10 of 50, and the median is a cached one.
    assert sticky["ttft_p50_s"] < 0.15
    assert sticky["ttft_p95_s"] == pytest.approx(2.1, abs=0.15)


def test_a_routing_policy_the_service_may_not_use_is_refused_with_its_own_reason(service):
    with pytest.raises(ScenarioError) as refused:
        build_scenarios(service, [{"name": "sglang router", "routing_policy": "cache_aware"},
                                  {"name": "typo", "routing_policy": "fastest"}])
    problems = " ".join(refused.value.problems)
    assert "alternatives[0].routing_policy: cache_aware routing needs a sglang runtime, not vllm." in problems
    assert "alternatives[1].routing_policy:" in problems and "fastest" in problems
