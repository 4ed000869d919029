"""The simulated engine core shared by vLLM and SGLang: block pool, prefix cache, scheduler, step loop.

One asyncio task per engine steps the running batch the way vLLM v1's scheduler does: every request
has `num_tokens` (prompt plus generated) and `num_computed`; a step gives each running request the
tokens it still needs within the batched-token budget (decodes 1, prefills a chunk), then admits
waiting requests while sequences and blocks allow. A step lasts the roofline of its FLOPs (prefill)
and the bytes it reads (weights plus KV, decode), so latency follows the GPU. Blocks run out →
the newest running request is preempted and recomputed later. Times are simulated seconds on a clock that can run
faster than the wall clock (`time_scale`) for tests. Block pool and prefix cache: `blocks`; requests: `request`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import deque
from dataclasses import dataclass, field

from capacity import roofline, startup
from capacity.arch import ModelArch
from capacity.gpus import HOST_LINK_FRACTION, Gpu
from kubesim.engines import speculative
from kubesim.engines.blocks import BlockPool, block_hashes
from kubesim.engines.cputier import CpuTier, TierConfig
from kubesim.engines.request import EngineObserver, Request


class Clock:
    """Simulated seconds: wall-clock seconds x `scale` since creation (scale 1 = real time)."""

    def __init__(self, scale: float = 1.0):
        self.scale = scale
        self._t0 = time.monotonic()

    def now(self) -> float:
        return (time.monotonic() - self._t0) * self.scale

    async def sleep_until(self, t: float) -> None:
        delay = (t - self.now()) / self.scale
        if delay > 0:
            await asyncio.sleep(delay)


@dataclass
class Physics:
    """Achieved fractions of the nominal GPU figures and the other physical constants of the model."""

    prefill_flops_fraction: float = roofline.PREFILL_FLOPS_FRACTION
    decode_bandwidth_fraction: float = roofline.DECODE_BANDWIDTH_FRACTION
    step_overhead_s: float = roofline.STEP_OVERHEAD_S  # scheduler, sampling and kernel launches per step
    kv_link_bandwidth: float = 50e9  # bytes/s between prefill and decode engines (400 Gb/s RDMA)
    kv_link_latency_s: float = 0.001
    storage_bandwidth: float = startup.CLUSTER_CACHE_BYTES_PER_S  # bytes/s reading weights from the cluster cache
    warmup_s: float = startup.ENGINE_INIT_S["vllm"]  # CUDA graphs, compilation, profiling run
    host_link_fraction: float = HOST_LINK_FRACTION  # achieved share of the GPU's host link in KV copies (cputier)


@dataclass
class CoreConfig:
    """What the step loop needs, already resolved from the engine's flags."""

    model: ModelArch
    gpu: Gpu
    tp: int
    num_blocks: int
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    kv_bytes_per_token_rank: float
    weight_bytes_rank: float
    prefix_caching: bool = True
    chunked_prefill: bool = True
    kv_role: str | None = None  # "producer", "consumer", "both" or None
    reserve_null_block: bool = True
    physics: Physics = field(default_factory=Physics)
    seed: int = 0
    cpu_tier: TierConfig | None = None  # the KV cache's host-memory tier (kv offloading, HiCache)
    slowdown: float = 1.0  # a fault's factor on every step (kubesim.workload.EngineFault)
    spec_tokens: int = 0  # speculative tokens drafted per decode step (0: off)
    spec_acceptance: float = 0.0  # the chance each drafted token is accepted, each independently
    draft: ModelArch | None = None  # the draft model whose forward passes draft them (None: n-gram, no GPU time)
    draft_kv_bytes_per_token_rank: float = 0.0  # the draft's own KV, in the model's blocks

    def spec_yield(self, k: int | None = None) -> float:
        """`spec_yield` of the configured drafts (or of k, where fewer fit the step) and acceptance."""
        return roofline.spec_yield(self.spec_tokens if k is None else k, self.spec_acceptance)



class EngineCore:
    """The continuous-batching loop of one engine instance (one data-parallel rank)."""

    def __init__(self, cfg: CoreConfig, clock: Clock, observer: EngineObserver | None = None):
        self.cfg = cfg
        self.clock = clock
        self.observer = observer or EngineObserver()
        self.pool = BlockPool(cfg.num_blocks, cfg.reserve_null_block)
        # The tier holds prefix-cache blocks: without prefix caching there are no hashes to keep.
        self.cpu = CpuTier(cfg.cpu_tier) if cfg.cpu_tier is not None and cfg.prefix_caching else None
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.transferring: list[Request] = []
        self.rng = random.Random(cfg.seed)
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.steps = 0
        self.busy_model_s = 0.0  # sum of modelled step durations
        self.emit_error_s = 0.0  # sum of |actual - modelled| step end times
        self.lost_s = 0.0  # timeline lost when the event loop could not keep up
        self._lead = 0.0
        self.last_prefill_hit_rate = 0.0
        self.gen_tokens_window: deque[tuple[float, int]] = deque()
        phys = cfg.physics
        self.roofline = roofline.Roofline(
            cfg.model, cfg.gpu, cfg.tp, cfg.weight_bytes_rank, cfg.kv_bytes_per_token_rank,
            flops_fraction=phys.prefill_flops_fraction, bandwidth_fraction=phys.decode_bandwidth_fraction,
            step_overhead_s=phys.step_overhead_s,
        )
        draft = cfg.draft
        self.draft_roofline = None if draft is None else roofline.Roofline(
            draft, cfg.gpu, cfg.tp, draft.weights_bytes(draft.dtype_bytes, cfg.tp), cfg.draft_kv_bytes_per_token_rank,
            flops_fraction=phys.prefill_flops_fraction, bandwidth_fraction=phys.decode_bandwidth_fraction,
            step_overhead_s=phys.step_overhead_s,
        )

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for req in [*self.running, *self.waiting, *self.transferring]:
            self._finish(req, "abort", self.clock.now())

    # -- requests ----------------------------------------------------------------------------------------
    def add(self, req: Request) -> Request:
        """Queue a request; await `req.done` (and read `req.queue` when streaming)."""
        req.arrival = self.clock.now()
        req.last_token = req.arrival
        req.done = asyncio.get_running_loop().create_future()
        if req.stream:
            req.queue = asyncio.Queue()
        if self.cfg.prefix_caching:
            req.block_hashes = block_hashes(req.prompt_tokens, self.cfg.block_size)
        self.waiting.append(req)
        self._wake.set()
        return req

    def abort(self, req: Request) -> None:
        if req.finish_reason is None:
            if req in self.waiting:
                self.waiting.remove(req)
            self._finish(req, "abort", self.clock.now())

    # -- model -------------------------------------------------------------------------------------------
    def step_time(self, prefill: list[tuple[int, int]], decode_ctx: list[int]) -> float:
        """Roofline of one step: prefill chunks (start, length) and decode contexts, on this engine's GPU."""
        return self.roofline.step_time(prefill, decode_ctx) * self.cfg.slowdown

    def decode_step_time(self, seqs: int, context: int) -> float:
        """`step_time` of `seqs` plain decodes at `context` tokens in all."""
        return self.roofline.decode_time(seqs, context) * self.cfg.slowdown

    def batch_seconds(self, batch: list[tuple[Request, int]]) -> tuple[float, list[tuple[int, int]], list[int], int]:
        """How long a step of `batch` takes, and its split: the roofline of its chunks and decodes, the draft
        model's forward passes, and the CPU tier's loads. Called once per step, by either clock."""
        prefill, decode_ctx, prefill_tokens = self.split(batch)
        dt = self.step_time(prefill, decode_ctx) + self.draft_seconds(batch) + self.tier_load_seconds()
        return dt, prefill, decode_ctx, prefill_tokens

    def draft_seconds(self, batch: list[tuple[Request, int]]) -> float:
        """The draft model's share of a step (`speculative.draft_seconds`; 0 without one)."""
        draft = self.draft_roofline
        return 0.0 if draft is None else speculative.draft_seconds(draft, batch) * self.cfg.slowdown

    def prefill_seconds(self, prompt_len: int) -> float:
        """Modelled time of one prompt's prefill alone, chunked by the batched-token budget."""
        budget = self.cfg.max_num_batched_tokens if self.cfg.chunked_prefill else max(prompt_len, 1)
        return self.roofline.prefill_seconds(prompt_len, budget)

    def split(self, batch: list[tuple[Request, int]]) -> tuple[list[tuple[int, int]], list[int], int]:
        """A batch as the roofline times it: (prefill chunks (start, length), decode contexts, prefill tokens). A
        speculative decode (a decoding request scheduled for n > 1 tokens: its last one and n - 1 drafts) verifies
        them at its context, timed as a chunk (the drafting itself, a lookup in the prompt, takes no GPU time)."""
        prefill, decode_ctx, prefill_tokens = [], [], 0
        for req, n in batch:
            if req.num_computed == req.num_tokens - 1 and req.generated:
                if n > 1:
                    prefill.append((req.num_computed, n))
                else:
                    decode_ctx.append(req.num_computed)
            else:
                prefill.append((req.num_computed, n))
                prefill_tokens += n
        return prefill, decode_ctx, prefill_tokens

    def tier_load_seconds(self) -> float:
        """The host-link time of the blocks this step's admissions load back from the CPU tier: they come back
        before the step computes (0 without a tier or loads). Called once per step, by either clock."""
        if self.cpu is None:
            return 0.0
        loads = self.cpu.take_step_load()
        if not loads:
            return 0.0
        tier = self.cpu.cfg
        self.observer.on_tier_load(loads, tier.bytes(loads), tier.seconds(loads))
        return tier.seconds(loads)

    def kv_transfer_seconds(self, tokens: int) -> float:
        cfg = self.cfg
        return cfg.physics.kv_link_latency_s + tokens * cfg.kv_bytes_per_token_rank * cfg.tp / (
            cfg.physics.kv_link_bandwidth
        )

    def kv_usage(self) -> float:
        return self.pool.usage()

    def gen_throughput(self, window: float = 5.0) -> float:
        now = self.clock.now()
        q = self.gen_tokens_window
        while q and q[0][0] < now - window:
            q.popleft()
        return sum(n for _, n in q) / window

    # -- scheduler ---------------------------------------------------------------------------------------
    def _blocks_needed(self, req: Request, upto: int) -> int:
        return max(0, -(-upto // self.cfg.block_size) - len(req.blocks))

    def _preempt(self, now: float) -> Request:
        victim = self.running.pop()
        self.pool.release(victim.blocks)
        victim.blocks = []
        victim.num_computed = 0
        victim.num_registered = 0
        victim.preemptions += 1
        self.waiting.appendleft(victim)
        self.observer.on_preempt(victim)
        return victim

    def _schedule(self, now: float) -> list[tuple[Request, int]]:
        cfg = self.cfg
        budget = cfg.max_num_batched_tokens
        if not cfg.chunked_prefill:
            budget = max(budget, cfg.max_model_len)
        batch: list[tuple[Request, int]] = []
        preempted: set[int] = set()
        bs = cfg.block_size
        pool = self.pool
        running = self.running
        i = 0
        spec = cfg.spec_tokens
        while i < len(running) and budget > 0:
            req = running[i]
            n = req.num_tokens - req.num_computed
            if n > budget:
                n = budget
            # A speculative decode verifies its drafts too: they take budget and slots (vLLM's lookahead slots); as
            # in vLLM, fewer drafts where the step's budget has less room.
            if spec and n == 1 and req.generated:
                n += min(spec, budget - 1)
            need = -(-(req.num_computed + n) // bs) - len(req.blocks)
            if need > 0:
                while need > pool.num_free:
                    victim = self._preempt(now)
                    preempted.add(id(victim))
                    if victim is req:
                        break
                if id(req) in preempted:
                    break
                req.blocks.extend(pool.allocate(need))
            batch.append((req, n))
            budget -= n
            i += 1
        if preempted:
            return batch
        while self.waiting and budget > 0 and len(self.running) < cfg.max_num_seqs:
            req = self.waiting[0]
            if req.remote_kv and req.num_computed == 0 and not req.blocks:
                need = self._blocks_needed(req, req.prompt_len)
                if need > self.pool.num_free:
                    break
                self.waiting.popleft()
                req.blocks = self.pool.allocate(need)
                req.first_scheduled = now
                req.kv_ready_at = now + self.kv_transfer_seconds(req.prompt_len)
                req.cached_tokens = 0
                self.observer.on_admit(req, 0, now)
                self.transferring.append(req)
                continue
            hits: list[int] = []
            loaded = 0  # blocks the CPU tier holds after the GPU's prefix: copied back instead of recomputed
            if req.num_computed == 0 and cfg.prefix_caching and req.block_hashes:
                # At least one token is always computed, so a full hit leaves the last block out.
                limit = (req.num_tokens - 1) // cfg.block_size
                hits = self.pool.lookup(req.block_hashes, limit)
                if self.cpu is not None:
                    loaded = self.cpu.lookup(req.block_hashes, len(hits), limit)
            hit_tokens = (len(hits) + loaded) * cfg.block_size
            n = req.num_tokens - hit_tokens
            if not cfg.chunked_prefill and n > budget:
                break
            n = min(n, budget)
            for blk in hits:
                self.pool.touch(blk)
            need = -(-(hit_tokens + n) // cfg.block_size) - len(hits)
            new = self.pool.allocate(need)
            if new is None:
                self.pool.release(hits)
                break
            self.waiting.popleft()
            req.blocks = hits + new
            req.num_computed = hit_tokens
            for j in range(loaded):
                self.pool.register(new[j], req.block_hashes[len(hits) + j])
            req.num_registered = len(hits) + loaded
            if req.first_scheduled is None:
                req.first_scheduled = now
                req.cached_tokens = hit_tokens
                req.host_cached_tokens = loaded * cfg.block_size
            if self.cpu is not None:
                self.cpu.load(loaded)
                self.observer.on_tier_lookup(req, loaded * cfg.block_size)
            self.observer.on_admit(req, len(hits) * cfg.block_size, now)
            if cfg.prefix_caching and req.num_registered < len(req.block_hashes):  # as vLLM's allocate_slots
                self._cache_blocks(req, hit_tokens + n)
            self.running.append(req)
            batch.append((req, n))
            budget -= n
        return batch

    def _cache_blocks(self, req: Request, tokens: int) -> None:
        """Cache the prompt's full blocks up to `tokens` (vLLM caches them as it schedules them: a request admitted
        later in the same step hits them)."""
        hashes, registered = req.block_hashes, req.num_registered
        if (full := min(tokens // self.cfg.block_size, len(hashes))) > registered:
            for j in range(registered, full):
                self.pool.register(req.blocks[j], hashes[j])
            if self.cpu is not None:
                self._write_through(hashes[registered:full])
            req.num_registered = full

    def _advance(self, batch: list[tuple[Request, int]], now: float) -> None:
        cfg = self.cfg
        caching, max_len = cfg.prefix_caching, cfg.max_model_len  # locals: this loop is most of a replay's time
        finished = []
        gen = 0
        itls: dict[float, int] = {}  # inter-token gap -> tokens (most share the previous step's end)
        for req, n in batch:
            computed, tokens = req.num_computed, req.num_tokens
            drafts = n - 1 if req.generated and computed == tokens - 1 else 0
            computed += n - drafts  # the drafts' KV counts once they are accepted, below
            if caching and req.num_registered < len(req.block_hashes):  # the prompt's full blocks, as computed
                self._cache_blocks(req, computed)
            if computed < tokens:
                req.num_computed = computed
                continue
            m = 1
            if drafts:
                m = self._emitted(req, drafts)
                self.observer.on_spec_decode(drafts, m - 1)
            req.num_computed = computed + m - 1  # the accepted drafts' KV was computed by the verify
            generated = req.generated = req.generated + m
            tokens = req.num_tokens = tokens + m
            gen += m
            if req.first_token is None:
                req.first_token = now
                req.prefill_done = now
                self.observer.on_first_token(req)
            else:
                gap = now - req.last_token
                itls[gap] = itls.get(gap, 0) + 1
            if req.queue is not None:
                req.queue.put_nowait(generated)
            req.last_token = now
            if generated >= req.output_len or tokens >= max_len:
                finished.append(req)
        for gap, count in itls.items():
            self.observer.on_tokens(gap, count)
        if gen:
            window = self.gen_tokens_window
            window.append((now, gen))
            while window[0][0] < now - 5.0:
                window.popleft()
        for req in finished:
            self.running.remove(req)
            self.pool.release(req.blocks)
            req.blocks = []
            reason = "length" if req.generated >= req.max_tokens or req.num_tokens >= self.cfg.max_model_len else "stop"
            self._finish(req, reason, now)

    def _emitted(self, req: Request, drafts: int) -> int:
        """Tokens a speculative decode of `drafts` drafts emits: the mean yield, its fractions carried per request
        (so the lab stays deterministic and every request gets the mean), within its output and the context."""
        owed = req.spec_carry + self.cfg.spec_yield(drafts)
        m = max(1, min(int(owed), 1 + drafts, req.output_len - req.generated,
                       self.cfg.max_model_len - req.num_tokens))
        req.spec_carry = owed - int(owed)
        return m

    def _write_through(self, hashes: list[int]) -> None:
        """Newly computed full blocks go to the CPU tier as well (an asynchronous copy: no step time)."""
        written, evicted = self.cpu.store(hashes)
        tier = self.cpu.cfg
        self.observer.on_tier_store(written, tier.bytes(written), tier.seconds(written), evicted)

    def _finish(self, req: Request, reason: str, now: float) -> None:
        req.finish_reason = reason
        if req.blocks:
            self.pool.release(req.blocks)
            req.blocks = []
        if req in self.running:
            self.running.remove(req)
        if req in self.transferring:
            self.transferring.remove(req)
        req.last_token = now if req.generated == 0 else req.last_token
        self.observer.on_finish(req)
        if req.queue is not None:
            req.queue.put_nowait(None)
        if req.done is not None and not req.done.done():
            req.done.set_result(req)

    def _reanchor(self, shift: float) -> None:
        """The loop fell behind by `shift`: move every request's timeline with it, so the latencies the
        metrics report stay the modelled ones (the stall is counted in `lost_s`, not in TTFT or ITL)."""
        self.lost_s += shift
        for r in (*self.running, *self.waiting, *self.transferring):
            r.arrival += shift
            r.last_token += shift
            r.kv_ready_at += shift
            if r.first_scheduled is not None:
                r.first_scheduled += shift
            if r.first_token is not None:
                r.first_token += shift
                r.prefill_done = r.first_token

    def _woken(self, idle_since: float, now: float) -> None:
        """Requests that arrived while the engine idled start now, as if it had woken at once: the wake-up
        delay is the event loop's (CPU load, timer resolution), not the model's, so it goes to `lost_s`, not
        into their TTFT."""
        late = [r for r in self.waiting if r.first_scheduled is None and idle_since <= r.arrival < now]
        if late:
            self.lost_s += now - min(r.arrival for r in late)
        for r in late:
            r.arrival = r.last_token = now

    async def _loop(self) -> None:
        """Step the batch on a model timeline `vt`: each step ends exactly `dt` after the previous one.

        Timer wake-ups overshoot by up to a millisecond (the selector's resolution); an adaptive lead
        `self._lead` cancels that on average, and the overshoot does not accumulate because the next step
        starts at the modelled end. Only when the loop falls more than `slack` behind (CPU overload) is
        the timeline re-anchored to the clock, and that time is counted in `lost_s`.
        """
        clock = self.clock
        slack = 0.02 * clock.scale
        vt = clock.now()
        while True:
            now = clock.now()
            if vt < now - slack:
                self._reanchor(now - vt)
                vt = now
            if self.transferring:
                ready = [r for r in self.transferring if r.kv_ready_at <= now]
                for req in ready:
                    self.transferring.remove(req)
                    # The prompt's KV arrived; the last prompt token is run to sample the first token.
                    req.num_computed = req.prompt_len - 1
                    self.running.append(req)
            batch = self._schedule(vt) if (self.running or self.waiting) else []
            if not batch:
                self._wake.clear()
                timeout = None
                if self.transferring:
                    timeout = max(0.0, min(r.kv_ready_at for r in self.transferring) - now) / clock.scale
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
                vt = clock.now()
                self._woken(now, vt)
                continue
            dt, prefill, decode_ctx, prefill_tokens = self.batch_seconds(batch)
            end = vt + dt
            await clock.sleep_until(end - self._lead)
            error = clock.now() - end
            self._lead = min(max(self._lead + 0.1 * error, 0.0), 0.002 * clock.scale)
            self.steps += 1
            self.busy_model_s += dt
            self.emit_error_s += abs(error)
            scheduled = sum(n for _, n in prefill) + len(decode_ctx)  # speculative decodes count their drafts
            self.observer.on_step(scheduled, prefill_tokens, 0, dt)
            self._advance(batch, end)
            vt = end

