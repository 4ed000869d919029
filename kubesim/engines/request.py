"""A request inside the simulated engine core, and the hooks the metrics layer implements."""

from __future__ import annotations

import asyncio
import math
import random
import zlib


class Request:
    """One request inside the engine; times are simulated seconds."""

    __slots__ = (
        "arrival",
        "block_hashes",
        "blocks",
        "cached_tokens",
        "done",
        "finish_reason",
        "first_scheduled",
        "first_token",
        "generated",
        "host_cached_tokens",
        "kv_ready_at",
        "last_token",
        "lora",
        "max_tokens",
        "num_computed",
        "num_registered",
        "num_tokens",
        "output_len",
        "preemptions",
        "prefill_done",
        "prompt_len",
        "prompt_tokens",
        "queue",
        "remote_kv",
        "request_id",
        "spec_carry",
        "stream",
    )

    def __init__(
        self,
        request_id: str,
        prompt_tokens: list[int],
        output_len: int,
        max_tokens: int,
        *,
        stream: bool = False,
        remote_kv: bool = False,
        lora: str | None = None,
    ):
        self.request_id = request_id
        self.prompt_tokens = prompt_tokens
        self.prompt_len = len(prompt_tokens)
        self.output_len = output_len
        self.max_tokens = max_tokens
        self.stream = stream
        self.remote_kv = remote_kv
        self.lora = lora
        self.block_hashes: list[int] = []
        self.blocks: list[int] = []
        self.num_computed = 0
        self.num_registered = 0
        self.generated = 0
        self.num_tokens = self.prompt_len  # prompt plus generated
        self.cached_tokens = -1  # set at first admission
        self.host_cached_tokens = 0  # of cached_tokens, those loaded from the CPU tier
        self.preemptions = 0
        self.spec_carry = 0.0  # the fraction of a token speculative decoding owes this request (core.spec_yield)
        self.arrival = 0.0
        self.first_scheduled: float | None = None
        self.prefill_done: float | None = None
        self.first_token: float | None = None
        self.last_token = 0.0
        self.kv_ready_at = 0.0
        self.finish_reason: str | None = None
        self.done: asyncio.Future | None = None
        self.queue: asyncio.Queue | None = None


class EngineObserver:
    """Hooks the metrics layer implements; the defaults do nothing."""

    def on_admit(self, req: Request, hit_tokens: int, now: float) -> None: ...

    def on_step(self, req_tokens: int, prefill_tokens: int, hit_tokens: int, duration: float) -> None: ...

    def on_tokens(self, itl: float, count: int) -> None: ...

    def on_first_token(self, req: Request) -> None: ...

    def on_finish(self, req: Request) -> None: ...

    def on_preempt(self, req: Request) -> None: ...

    def on_spec_decode(self, drafted: int, accepted: int) -> None:
        """A speculative decode verified `drafted` drafted tokens and accepted the first `accepted` of them."""

    # The CPU tier (only called when the engine has one).
    def on_tier_lookup(self, req: Request, host_hit_tokens: int) -> None: ...

    def on_tier_load(self, blocks: int, nbytes: float, seconds: float) -> None: ...

    def on_tier_store(self, blocks: int, nbytes: float, seconds: float, evicted: int) -> None: ...


def output_length(seed: int, request_id: str, max_tokens: int, ignore_eos: bool, rng_cap: int = 512) -> int:
    """Deterministic 'natural' length: max_tokens when EOS is ignored, else a seeded draw capped by it."""
    if ignore_eos:
        return max_tokens
    r = random.Random(zlib.crc32(f"{seed}:{request_id}".encode()))  # str hash() is salted per process
    natural = int(math.exp(r.gauss(math.log(128), 0.6)))
    return max(1, min(max_tokens, natural, rng_cap))
