"""Waking a sleeping service on the data path: before a request of a service the snapshot says is asleep
(`sleeping`: {level, engine, engines}) goes on, its engines are woken, once, with vLLM's dev-mode endpoints:
- after level 1: `POST /wake_up` (the weights come back from host memory);
- after level 2: `POST /wake_up?tags=weights`, `POST /collective_rpc {"method": "reload_weights"}`,
  `POST /wake_up?tags=kv_cache` (the weights were discarded and are loaded again);
or SGLang's: `POST /resume_memory_occupation {}` (level 1 only: the weights come back from their CPU backup).
Requests that arrive during a wake wait for the same wake. An engine that is already awake answers "awake",
so a snapshot a little behind costs one round trip per engine, not a wrong answer.
"""

from __future__ import annotations

import asyncio
import logging
import time

import aiohttp

from enginevocab import sglang as sglang_vocab
from enginevocab import vllm as vllm_vocab

log = logging.getLogger("gateway.wake")


class Waker:
    def __init__(self, timeout_s: float = 300.0):
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._wakes: dict[tuple[int, str], asyncio.Task] = {}  # (service, the sleep: time, engines) → its wake
        self.woken = 0  # engines woken by this gateway (only grows)
        self.seconds = 0.0  # time spent waking them

    async def wake_if_asleep(self, service: dict) -> None:
        """Wake the service's engines if the snapshot says they sleep; returns once they are awake."""
        sleeping = service.get("sleeping")
        if not sleeping or not sleeping.get("engines"):
            return
        key = (service["id"], f"{sleeping.get('since')}:{','.join(sleeping['engines'])}")
        task = self._wakes.get(key)
        if task is None:
            for old in [k for k in self._wakes if k[0] == service["id"]]:
                del self._wakes[old]  # an earlier sleep's wake
            task = self._wakes[key] = asyncio.ensure_future(self._wake(sleeping))
        await asyncio.shield(task)

    async def _wake(self, sleeping: dict) -> None:
        started = time.monotonic()
        async with aiohttp.ClientSession(timeout=self.timeout) as session:
            results = await asyncio.gather(*(self._wake_one(session, address, sleeping["level"],
                                                            sleeping.get("engine", "vllm"))
                                             for address in sleeping["engines"]), return_exceptions=True)
        for address, result in zip(sleeping["engines"], results, strict=True):
            if isinstance(result, BaseException):
                log.warning("waking %s failed: %s", address, result)
            else:
                self.woken += 1
        self.seconds += time.monotonic() - started

    async def _wake_one(self, session: aiohttp.ClientSession, address: str, level: int, engine: str) -> None:
        base = f"http://{address}"
        if engine == "sglang":
            calls = [(sglang_vocab.RESUME_MEMORY_PATH, None, {})]
        elif level == 2:
            calls = [(vllm_vocab.WAKE_UP_PATH, {"tags": "weights"}, None),
                     (vllm_vocab.COLLECTIVE_RPC_PATH, None, vllm_vocab.RELOAD_WEIGHTS_RPC),
                     (vllm_vocab.WAKE_UP_PATH, {"tags": "kv_cache"}, None)]
        else:
            calls = [(vllm_vocab.WAKE_UP_PATH, None, None)]
        for path, params, body in calls:
            async with session.post(base + path, params=params, json=body) as response:
                response.raise_for_status()
