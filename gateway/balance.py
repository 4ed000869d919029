"""Choosing an upstream for a service without a router: least outstanding requests across its ready pods,
with prefix affinity (rendezvous hashing of the prompt's leading blocks) where the service's routing policy
is prefix-aware, and session affinity (rendezvous hashing of `x-session-id`, else the body's `user`) where it
is `session`. An affine pick yields to the least loaded pod when it has `spill` more requests in flight, so
one hot prefix or session cannot pile a pod's queue up while others idle. A routed service is sent to its
least loaded router, which balances its own engines. A request for a LoRA adapter goes first to the pods that
already hold it, first those running it, then those with a free LoRA slot (`Balancer.holding`)."""

from __future__ import annotations

import hashlib
import json

PREFIX_POLICIES = frozenset({"prefix_aware", "kv_aware", "cache_aware"})
SESSION_POLICY = "session"
SESSION_HEADER = b"x-session-id"
BLOCK_CHARS = 128  # the production-stack router's chunk: about 32 tokens of English
PREFIX_BLOCKS = 4  # the leading blocks hashed: a shared system prompt decides, the user's turn does not


def prompt_text(request: dict) -> str:
    """The prompt as the engine would see its start: chat messages' contents in order, or the prompt."""
    if "messages" in request:
        parts = []
        for message in request.get("messages") or []:
            content = message.get("content") if isinstance(message, dict) else message
            parts.append(content if isinstance(content, str) else json.dumps(content, sort_keys=True))
        return "\n".join(parts)
    prompt = request.get("prompt")
    return prompt if isinstance(prompt, str) else json.dumps(prompt)


def affinity_key(policy: str, request: dict, headers: dict) -> str | None:
    """What the pick is sticky to under `policy`, or None for plain least-outstanding."""
    if policy in PREFIX_POLICIES:
        return prompt_text(request)[: BLOCK_CHARS * PREFIX_BLOCKS]
    if policy == SESSION_POLICY:
        session = headers.get(SESSION_HEADER, b"").decode("latin-1") or request.get("user")
        return session if isinstance(session, str) and session else None
    return None


def _weight(key: str, address: str) -> bytes:
    return hashlib.blake2b(f"{key}\0{address}".encode(), digest_size=8).digest()


def _active(endpoint: dict) -> set[str]:
    """The adapters of the requests the endpoint's engine runs and queues now (its slots in use)."""
    lora = endpoint.get("lora") or {}
    return {*lora.get("running", ()), *lora.get("waiting", ())}


def _free_slot(endpoint: dict) -> bool:
    lora = endpoint.get("lora")
    return lora is None or len(_active(endpoint)) < lora.get("max_lora", 0)


class Balancer:
    """Requests in flight per upstream address (this replica's view) and the pick."""

    def __init__(self, spill: int = 8):
        self.outstanding: dict[str, int] = {}
        self.spill = spill
        self._turn = 0

    def pick(self, endpoints: list[dict], key: str | None = None, adapter: str | None = None) -> dict | None:
        if not endpoints:
            return None
        load = self.outstanding
        if adapter is not None:
            endpoints = self.holding(endpoints, adapter)
        # Least outstanding; ties go round the pods in turn, so an idle service still spreads.
        self._turn += 1
        n = len(endpoints)
        least = min(range(n), key=lambda i: (load.get(endpoints[i]["address"], 0), (i - self._turn) % n))
        if key is None:
            return endpoints[least]
        # Rendezvous hashing: each key's pod stays its pod when others come and go.
        affine = max(endpoints, key=lambda e: _weight(key, e["address"]))
        if load.get(affine["address"], 0) - load.get(endpoints[least]["address"], 0) >= self.spill:
            return endpoints[least]
        return affine

    def holding(self, endpoints: list[dict], adapter: str) -> list[dict]:
        """LoRA affinity, as llm-d's lora-affinity scorer, in tiers: the pods whose engine runs or queues requests
        of `adapter` now (the snapshot's per-endpoint `lora`, from vLLM's `lora_requests_info`: the adapter is in
        a slot), else the pods holding it (`adapters`, from /v1/models) with a free slot (fewer adapters running
        and waiting than `max_lora`; a pod without `lora` counts as free), else every pod holding it; all pods
        when none holds it (the one chosen serves it once it is loaded), or when the least loaded pod of the
        tier has `spill` more requests in flight than the least loaded pod."""
        holders = [e for e in endpoints if adapter in e.get("adapters", ())]
        tiers = ([e for e in holders if adapter in _active(e)], [e for e in holders if _free_slot(e)], holders)
        chosen = next((tier for tier in tiers if tier), None)
        if chosen is None or len(chosen) == len(endpoints):
            return endpoints
        load = self.outstanding
        if (min(load.get(e["address"], 0) for e in chosen)
                - min(load.get(e["address"], 0) for e in endpoints) >= self.spill):
            return endpoints
        return chosen

    def acquire(self, address: str) -> None:
        self.outstanding[address] = self.outstanding.get(address, 0) + 1

    def release(self, address: str) -> None:
        left = self.outstanding.get(address, 0) - 1
        if left > 0:
            self.outstanding[address] = left
        else:
            self.outstanding.pop(address, None)
