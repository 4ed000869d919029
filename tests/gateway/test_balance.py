"""The balancer for services without a router: least outstanding, prefix and session affinity by
rendezvous hashing, and an affine pod that is too busy yielding to the least loaded one."""

from __future__ import annotations

from gateway.balance import BLOCK_CHARS, PREFIX_BLOCKS, Balancer, affinity_key

PODS = [{"pod": f"p{i}", "address": f"127.9.0.{i}:8000"} for i in range(4)]
SYSTEM = "You are the support assistant of a shop that sells boats. " * 20


def test_least_outstanding_wins_and_ties_take_turns():
    balancer = Balancer()
    for endpoint in PODS[:3]:
        balancer.acquire(endpoint["address"])
    assert balancer.pick(PODS) == PODS[3]
    balancer.release(PODS[0]["address"])
    assert balancer.pick(PODS) in (PODS[0], PODS[3])
    idle = Balancer()
    assert {idle.pick(PODS)["pod"] for _ in range(4)} == {"p0", "p1", "p2", "p3"}
    assert Balancer().pick([]) is None


def test_prefix_affinity_follows_the_leading_blocks_only():
    key = affinity_key("prefix_aware", {"messages": [{"role": "system", "content": SYSTEM},
                                                     {"role": "user", "content": "Which boat?"}]}, {})
    other_turn = affinity_key("prefix_aware", {"messages": [{"role": "system", "content": SYSTEM},
                                                            {"role": "user", "content": "Price?"}]}, {})
    assert key == other_turn and len(key) == BLOCK_CHARS * PREFIX_BLOCKS
    balancer = Balancer()
    chosen = balancer.pick(PODS, key)
    assert all(balancer.pick(PODS, key) == chosen for _ in range(5))
    # Neither the pods' order nor another pod leaving moves the key; many prefixes spread over the pods.
    assert balancer.pick(PODS[::-1], key) == chosen
    others = [e for e in PODS if e != chosen]
    assert balancer.pick([*others[1:], chosen], key) == chosen
    spread = {balancer.pick(PODS, affinity_key("kv_aware", {"prompt": f"tenant {i}: " + SYSTEM}, {}))["pod"]
              for i in range(40)}
    assert len(spread) >= 3


def test_an_affine_pod_that_is_far_busier_yields():
    balancer = Balancer(spill=3)
    key = affinity_key("prefix_aware", {"prompt": SYSTEM}, {})
    chosen = balancer.pick(PODS, key)
    for _ in range(2):
        balancer.acquire(chosen["address"])
    assert balancer.pick(PODS, key) == chosen
    balancer.acquire(chosen["address"])
    assert balancer.pick(PODS, key) != chosen


def test_session_affinity_by_header_then_user():
    assert affinity_key("session", {"prompt": "x", "user": "u1"}, {b"x-session-id": b"s1"}) == "s1"
    assert affinity_key("session", {"prompt": "x", "user": "u1"}, {}) == "u1"
    assert affinity_key("session", {"prompt": "x"}, {}) is None
    assert affinity_key("round_robin", {"prompt": SYSTEM}, {b"x-session-id": b"s1"}) is None
    balancer = Balancer()
    assert len({balancer.pick(PODS, "s1")["pod"] for _ in range(6)}) == 1


def test_a_lora_request_goes_to_the_pods_holding_its_adapter_until_they_are_spill_busier():
    pods = [{**PODS[0], "adapters": ["chat"]}, {**PODS[1], "adapters": ["chat", "sql"]}, PODS[2], PODS[3]]
    balancer = Balancer(spill=3)
    assert {balancer.pick(pods, adapter="sql")["pod"] for _ in range(6)} == {"p1"}
    assert {balancer.pick(pods, adapter="chat")["pod"] for _ in range(6)} == {"p0", "p1"}
    assert {balancer.pick(pods, adapter="math")["pod"] for _ in range(8)} == {"p0", "p1", "p2", "p3"}  # none holds
    for _ in range(2):
        balancer.acquire(pods[1]["address"])
    assert balancer.pick(pods, adapter="sql")["pod"] == "p1"  # 2 more in flight than the idle pods: still p1
    balancer.acquire(pods[1]["address"])
    assert balancer.pick(pods, adapter="sql")["pod"] in ("p0", "p2", "p3")  # 3 more: it yields
    # Under prefix affinity too, the key picks among the holders only.
    key = affinity_key("prefix_aware", {"prompt": SYSTEM}, {})
    assert Balancer().pick(pods, key, adapter="chat")["pod"] in ("p0", "p1")


def test_lora_affinity_prefers_the_pods_running_the_adapter_then_those_with_a_free_slot():
    """The engines' slot usage (vLLM's lora_requests_info, the snapshot's `lora`): all four pods hold sql."""
    held = ["chat", "sql", "math"]
    pods = [{**PODS[0], "adapters": held, "lora": {"running": ["chat"], "waiting": ["math"], "max_lora": 2}},
            {**PODS[1], "adapters": held, "lora": {"running": ["sql"], "waiting": [], "max_lora": 2}},
            {**PODS[2], "adapters": held, "lora": {"running": [], "waiting": [], "max_lora": 2}},
            {**PODS[3], "adapters": held, "lora": {"running": ["chat"], "waiting": ["sql"], "max_lora": 2}}]
    balancer = Balancer(spill=4)
    # sql runs or waits on p1 and p3: in a slot there already, so no swap.
    assert {balancer.pick(pods, adapter="sql")["pod"] for _ in range(6)} == {"p1", "p3"}
    # math is active on p0 only; chat on p0 and p3.
    assert {balancer.pick(pods, adapter="math")["pod"] for _ in range(4)} == {"p0"}
    # An adapter held everywhere and active nowhere goes where a slot is free: p1 (1 of 2) and p2 (0 of 2), not p0
    # or p3 whose two slots are in use.
    pods = [{**p, "adapters": [*p["adapters"], "docs"]} for p in pods]
    assert {balancer.pick(pods, adapter="docs")["pod"] for _ in range(6)} == {"p1", "p2"}
    # With no free slot anywhere it falls back to every holder.
    full = [{**p, "lora": {"running": ["a", "b"], "waiting": [], "max_lora": 2}} for p in pods]
    assert {balancer.pick(full, adapter="docs")["pod"] for _ in range(8)} == {"p0", "p1", "p2", "p3"}
    # The spill rule holds for the tier as for the holders.
    for _ in range(4):
        balancer.acquire(pods[0]["address"])
    assert balancer.pick(pods, adapter="math")["pod"] != "p0"
