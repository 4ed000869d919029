"""An engine core stepped on a virtual clock, with no event loop and no waiting: for replaying hours of
traffic in seconds (bench/autoscale.py).

`VirtualEngine` runs the same `EngineCore` scheduler (`_schedule`) and roofline (`step_time`) as the live
engine's step loop and applies the same `_advance`; only the clock differs: a step ends `step_time` after it
starts, on a timeline the caller advances. While every running request is decoding and nothing waits, the
steps up to the next finish are applied at once (each with its own modelled duration, so times are those of
step-by-step execution); blocks are allocated for them up front.
"""

from __future__ import annotations

from kubesim.engines.core import Clock, EngineCore, EngineObserver, Request, block_hashes
from kubesim.engines.coreconfig import CoreConfig


class _Finished(EngineObserver):
    def __init__(self):
        self.done: list[Request] = []

    def on_finish(self, req: Request) -> None:
        self.done.append(req)


class VirtualEngine:
    """One engine instance on a virtual timeline (seconds)."""

    def __init__(self, cfg: CoreConfig, start: float = 0.0, fast_forward: bool = True):
        self.fast_forward = fast_forward  # off: every step through the exact path (tests compare the two)
        self._finished = _Finished()
        self.core = EngineCore(cfg, Clock(), self._finished)
        self.vt = start  # when the engine is next free to start a step

    # -- what an autoscaler's scrape would read ----------------------------------------------------------------
    @property
    def running(self) -> int:
        return len(self.core.running)

    @property
    def waiting(self) -> int:
        return len(self.core.waiting)

    def kv_usage(self) -> float:
        return self.core.kv_usage()

    @property
    def busy(self) -> bool:
        return bool(self.core.running or self.core.waiting)

    # -- requests ----------------------------------------------------------------------------------------------
    def submit(self, req: Request, now: float) -> None:
        """Queue a request arriving at `now` (what `EngineCore.add` does, without futures)."""
        if not self.busy:
            self.vt = max(self.vt, now)
        req.arrival = now
        req.last_token = now
        if self.core.cfg.prefix_caching:
            req.block_hashes = block_hashes(req.prompt_tokens, self.core.cfg.block_size)
        self.core.waiting.append(req)

    def take_finished(self) -> list[Request]:
        done, self._finished.done = self._finished.done, []
        return done

    # -- stepping ----------------------------------------------------------------------------------------------
    def run_until(self, t: float) -> None:
        """Execute every step that starts before `t` (the last may end after it)."""
        core = self.core
        while self.vt < t and (core.running or core.waiting):
            # Speculative decodes emit a varying number of tokens a step: they go through the exact path.
            if self.fast_forward and not core.waiting and not core.cfg.spec_tokens and self._fast_forward(t):
                continue
            batch = core._schedule(self.vt)
            if not batch:
                break  # nothing can run (blocks exhausted by waiting prompts): idle until something changes
            end = self.vt + core.batch_seconds(batch)[0]
            core.steps += 1
            core._advance(batch, end)
            self.vt = end
        if not (core.running or core.waiting):
            self.vt = max(self.vt, t)

    def _fast_forward(self, t: float) -> bool:
        """Apply k ≥ 1 pure-decode steps at once (every running request decoding, none finishing); False when
        not possible."""
        core, cfg = self.core, self.core.cfg
        running = core.running
        if not running:
            return False
        left, ctx, max_len = cfg.max_model_len, 0, cfg.max_model_len
        for r in running:  # one pass: all decoding, the fewest tokens any has left, and their contexts
            computed, tokens = r.num_computed, r.num_tokens
            if not r.generated or computed != tokens - 1:
                return False
            left = min(left, r.output_len - r.generated, max_len - tokens)
            ctx += computed
        k_max = left - 1  # the step that finishes a request goes through the exact path
        if k_max < 1:
            return False
        n = len(running)
        durations = []
        end = self.vt
        while len(durations) < k_max and end < t:
            dt = core.decode_step_time(n, ctx + len(durations) * n)
            durations.append(dt)
            end += dt
        k = len(durations)
        bs = cfg.block_size
        need = [max(0, -(-(r.num_computed + k) // bs) - len(r.blocks)) for r in running]
        if sum(need) > core.pool.num_free:
            return False
        for r, extra in zip(running, need, strict=True):
            if extra:
                r.blocks.extend(core.pool.allocate(extra))
            r.num_computed += k
            r.num_tokens += k
            r.generated += k
            r.last_token = end
        core.steps += k
        core.busy_model_s += end - self.vt
        self.vt = end
        return True
