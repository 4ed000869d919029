"""vLLM's sleep mode on a simulated engine: `POST /sleep`, `POST /wake_up`, `GET /is_sleeping` and the
`/collective_rpc` call that reloads weights after a level 2 sleep, with `vllm:engine_sleep_state`.

As vLLM 0.32.0 does (vllm/entrypoints/serve/dev/sleep/api_router.py, vllm/v1/engine/core.py):
- the endpoints exist only when the pod's environment has VLLM_SERVER_DEV_MODE=1;
- `/sleep?level=0|1|2&mode=abort|wait` pauses the scheduler (level 0), also offloads the weights to host memory
  and drops the KV cache and prefix cache (level 1), or discards the weights too (level 2); mode `abort`
  (the default) aborts the requests in flight, `wait` lets them finish first;
- requests that arrive while the engine sleeps are accepted and wait; they run once it is fully awake;
- `/wake_up` (all tags, or `?tags=weights` / `?tags=kv_cache`) answers when the memory is back: the weights'
  copy over the host link after level 1 (`capacity.sleep`); after level 2 the weights must be reloaded
  (`/collective_rpc {"method": "reload_weights"}`: read from storage, then copied) between the two tags;
- `/health` stays 200 while asleep, so the pod stays Ready and keeps its GPUs.

And SGLang's equivalent (`--enable-memory-saver`): `POST /release_memory_occupation` gives back the weights' and the
KV cache's GPU memory (optional JSON `{"tags": [...]}`: "weights", "kv_cache"; all by default) and
`POST /resume_memory_occupation` takes it again. With `--enable-weights-cpu-backup` the weights are kept in host
memory and copied back on resume (as vLLM's level 1); without it they come back empty (as level 2 without a reload:
a warning in the log). SGLang exposes no sleep state in its metrics, so kubesim exposes none either. What is
uncertain about SGLang's own behaviour is in docs/sleep-mode.md.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from aiohttp import web

from capacity.sleep import WakeFacts, copy_seconds, reload_seconds
from enginevocab import sglang as sglang_vocab
from enginevocab import vllm as vocab

WEIGHTS, KV_CACHE = "weights", "kv_cache"
MODES = ("abort", "wait")  # vLLM's "keep" (requests kept paused in the batch) is not modelled


@dataclass(frozen=True)
class SleepConfig:
    """Whether the engine may sleep (--enable-sleep-mode), whether its endpoints are mounted (dev mode), and
    what its wake takes."""

    enabled: bool
    endpoints: bool
    facts: WakeFacts
    weights_backup: bool = True  # SGLang: --enable-weights-cpu-backup (vLLM's level says it instead)


def sleep_config(enabled: bool, env: dict[str, str], facts: WakeFacts) -> SleepConfig:
    mounted = all(env.get(name) == value for name, value in vocab.SLEEP_ENDPOINTS_ENV.items())
    return SleepConfig(bool(enabled), mounted, facts)


class SleepingEngine:
    """The sleep-mode half of EngineWorkload: its state, the held requests and the endpoints."""

    sleep_level = 0
    paused = False  # the scheduler is paused (any level, until fully awake)
    weights_stale = False  # woken after level 2 without the weights reloaded
    asleep_since: float | None = None  # time.time() of the last sleep
    _sleeping_tags: frozenset[str] = frozenset()
    _held: list | None = None

    def _sleep_routes(self, router: web.UrlDispatcher) -> None:
        sleep = self.spec.sleep
        if self.spec.kind == "sglang" and sleep is not None:
            router.add_post(sglang_vocab.RELEASE_MEMORY_PATH, self._release_memory)
            router.add_post(sglang_vocab.RESUME_MEMORY_PATH, self._resume_memory)
            return
        if self.spec.kind != "vllm" or sleep is None or not sleep.endpoints:
            return
        router.add_post(vocab.SLEEP_PATH, self._sleep)
        router.add_post(vocab.WAKE_UP_PATH, self._wake_up)
        router.add_get(vocab.IS_SLEEPING_PATH, self._is_sleeping)
        router.add_post(vocab.COLLECTIVE_RPC_PATH, self._collective_rpc)

    # -- requests while asleep ------------------------------------------------------------------------------
    def hold_if_paused(self, core, req) -> None:
        """Keep a request the core just queued out of its scheduler until the engine is fully awake."""
        if not self.paused:
            return
        core.waiting.remove(req)
        self._held = [*(self._held or []), (core, req)]

    def _release(self) -> None:
        for core, req in self._held or []:
            if req.finish_reason is None:
                core.waiting.append(req)
                core._wake.set()
        self._held = []

    def _record_state(self) -> None:
        if self.spec.kind != "vllm":
            return  # SGLang has no sleep-state metric
        state = {0: "awake", 1: "weights_offloaded", 2: "discard_all"}[self.sleep_level if self.paused else 0]
        for metrics in self.engine_metrics:
            for label in vocab.SLEEP_STATES:
                metrics.sleep_state.labels(*metrics.lv, label).set(1 if label == state else 0)

    # -- endpoints ------------------------------------------------------------------------------------------
    async def _sleep(self, request: web.Request) -> web.Response:
        try:
            level = int(request.query.get("level", "1"))
        except ValueError:
            level = -1
        mode = request.query.get("mode", "abort")
        if level not in (0, 1, 2):
            return _unprocessable("level", "Input should be greater than or equal to 0 and less than or equal to 2")
        if mode not in (*MODES, "keep"):
            return _unprocessable("mode", "Input should be 'abort', 'wait' or 'keep'")
        if mode == "keep":
            return self._error(400, "kubesim: sleep mode=keep is not modelled; use abort or wait")
        if level > 0 and not self.spec.sleep.enabled:
            return self._error(400, "kubesim: the engine was started without --enable-sleep-mode")
        if mode == "wait":
            while self.load():
                await asyncio.sleep(0.01)
        for core in self.cores:
            for req in [*core.running, *core.waiting, *core.transferring]:
                core.abort(req)
        self.paused = True
        if level > 0:
            self.sleep_level, self._sleeping_tags = level, frozenset((WEIGHTS, KV_CACHE))
            for core in self.cores:
                core.pool = type(core.pool)(core.cfg.num_blocks, core.cfg.reserve_null_block)  # KV and prefix cache
            self.asleep_since = time.time()
            self._logs.append(f"INFO [gpu_worker.py] Sleep mode level {level}: "
                              f"{'offloaded' if level == 1 else 'discarded'} the weights; KV cache discarded")
        self._record_state()
        return web.json_response({"status": "sleeping", "level": level})

    async def _wake_up(self, request: web.Request) -> web.Response:
        tags = request.query.getall("tags", []) or None
        wanted = frozenset(tags) if tags else self._sleeping_tags
        if tags and not wanted <= self._sleeping_tags:
            # vLLM logs "Tag ... is not in sleeping tags" and leaves the engine as it is.
            return web.json_response({"status": "sleeping" if self.paused else "awake", "tags": tags})
        facts = self.spec.sleep.facts
        seconds = 0.0
        if WEIGHTS in wanted and self.sleep_level == 1:
            seconds += copy_seconds(facts)
        if KV_CACHE in wanted:
            seconds += facts.overhead_s
        await asyncio.sleep(seconds / self.spec.time_scale)
        if WEIGHTS in wanted and self.sleep_level == 2:
            self.weights_stale = True
        self._sleeping_tags -= wanted
        if not self._sleeping_tags:
            self.paused, self.sleep_level, self.asleep_since = False, 0, None
            if self.weights_stale:
                self._logs.append("WARNING kubesim: awake after a level 2 sleep without reloaded weights")
            self._release()
        self._record_state()
        return web.json_response({"status": "sleeping" if self.paused else "awake", "tags": tags})

    async def _sglang_tags(self, request: web.Request) -> frozenset[str] | web.Response:
        """The body's tags (all of SGLang's when absent), or a 400 for tags SGLang does not know."""
        try:
            body = await request.json() if request.can_read_body else {}
        except ValueError:
            return self._error(400, "kubesim: the body must be JSON")
        tags = (body or {}).get("tags") if isinstance(body, dict) else None
        if tags is None:
            return frozenset(sglang_vocab.MEMORY_TAGS)
        if not isinstance(tags, list) or not set(tags) <= set(sglang_vocab.MEMORY_TAGS):
            return self._error(400, f"kubesim: tags must be a list of {', '.join(sglang_vocab.MEMORY_TAGS)}")
        return frozenset(tags)

    async def _release_memory(self, request: web.Request) -> web.Response:
        """SGLang's release: pause, drop the KV cache, give back the weights' memory (backed up in host memory when
        the engine keeps a CPU backup)."""
        if not self.spec.sleep.enabled:
            return self._error(400, "kubesim: the engine was started without --enable-memory-saver")
        tags = await self._sglang_tags(request)
        if isinstance(tags, web.Response):
            return tags
        if self.load():
            return self._error(400, "kubesim: release_memory_occupation with requests in flight is not modelled")
        self.paused = True
        self.sleep_level = 1 if self.spec.sleep.weights_backup else 2
        self._sleeping_tags = self._sleeping_tags | tags
        if KV_CACHE in tags:
            for core in self.cores:
                core.pool = type(core.pool)(core.cfg.num_blocks, core.cfg.reserve_null_block)
        self.asleep_since = time.time()
        self._logs.append(f"[INFO] Release memory occupation: {', '.join(sorted(tags))}"
                          + ("" if self.spec.sleep.weights_backup or WEIGHTS not in tags else
                             " (no CPU backup of the weights)"))
        return web.json_response(None)

    async def _resume_memory(self, request: web.Request) -> web.Response:
        """SGLang's resume: the weights copied back from their CPU backup over the host link, the KV cache given
        back; requests held meanwhile run once nothing is released any more."""
        tags = await self._sglang_tags(request)
        if isinstance(tags, web.Response):
            return tags
        wanted = tags & self._sleeping_tags
        facts = self.spec.sleep.facts
        seconds = (copy_seconds(facts) if WEIGHTS in wanted and self.spec.sleep.weights_backup else 0.0) + (
            facts.overhead_s if KV_CACHE in wanted else 0.0)
        await asyncio.sleep(seconds / self.spec.time_scale)
        if WEIGHTS in wanted and not self.spec.sleep.weights_backup:
            self.weights_stale = True
            self._logs.append("WARNING kubesim: weights resumed without a CPU backup: their memory is empty")
        self._sleeping_tags -= wanted
        if not self._sleeping_tags:
            self.paused, self.sleep_level, self.asleep_since = False, 0, None
            self._release()
        return web.json_response(None)

    async def _is_sleeping(self, request: web.Request) -> web.Response:
        return web.json_response({"is_sleeping": self.paused})

    async def _collective_rpc(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("method") != vocab.RELOAD_WEIGHTS_RPC["method"]:
            return self._error(400, f"kubesim: collective_rpc method {body.get('method')!r} is not modelled")
        if WEIGHTS in self._sleeping_tags:
            return self._error(500, "kubesim: the weights' memory is asleep; wake_up?tags=weights first")
        await asyncio.sleep(reload_seconds(self.spec.sleep.facts) / self.spec.time_scale)
        self.weights_stale = False
        return web.json_response({"results": [None] * max(self.spec.core.tp, 1)})


def _unprocessable(name: str, message: str) -> web.Response:
    """FastAPI's 422 for a query parameter out of range."""
    return web.json_response({"detail": [{"type": "value_error", "loc": ["query", name], "msg": message}]},
                             status=422)
