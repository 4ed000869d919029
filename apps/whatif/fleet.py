"""A pool of engine replicas under a scaling policy, replayed on a simulated clock: the what-if lab's and the
autoscaler benchmark's one fleet model.

Each replica is kubesim's engine core (`kubesim.engines.virtual.VirtualEngine`: the live engines' scheduler,
KV-cache block pool and roofline step times) on a virtual timeline, so an hour of traffic replays in seconds.
A new replica holds its GPUs from creation and serves after the engine's cold start (model load and
warm-up, as the engine simulation derives it). A replica scaled away finishes what it holds, then frees its
GPUs. A least-loaded router spreads arrivals and holds what no ready replica can take (activation from zero,
or more than `router_cap` requests in flight per replica).

Every `period_s` a policy sees what a scrape would show (per-pod waiting and running requests and KV-cache
usage, TTFT/ITL p95 of the last interval, requests held) and returns the replicas it wants; the policies
(`apps.whatif.policies`) decide with the control plane's own rules (`apps.autoscaling.rules`), never a copy. A
policy with `surges` (the built-in autoscaler) also sees each scrape between evaluations, every `scrape_s`, and
may scale up there (`apps.autoscaling.surge`), as the live control plane checks each scrape (workers/surge.py).
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field

from apps.autoscaling.rules import (
    PodSample,
)
from kubesim.engines.core import Request
from kubesim.engines.routing import DEFAULT_SESSION_HEADER, RequestInfo, RoutingState
from kubesim.engines.virtual import VirtualEngine
from kubesim.workload import Endpoint

PERIOD_S = 15.0
SCRAPE_S = 5.0  # the telemetry scrape period: what a surge check between evaluations reads
LEAST_LOADED = "least_loaded"
ROUTER_CAP = 96  # requests in flight per replica before the router holds more (an engine batches ~50 here)
DRAIN_S = 600  # after the load ends, the work in flight may finish for this long (GPUs stay held meanwhile)


class OverBudget(RuntimeError):
    """A replay stopped because it used more CPU time than it was given."""


@dataclass(frozen=True)
class Slo:
    """What a request must meet. TTFT: a budget of `ttft_s` (the queueing allowance) plus the request's own
    prefill time on an idle replica (its floor: what no replica count can shorten), as Splitwise and
    DistServe judge TTFT; the absolute `ttft_s` is reported beside it. ITL: the mean inter-token latency over
    the request's output."""

    ttft_s: float = 2.0
    itl_s: float = 0.1


DEFAULT_SLO = Slo(2.0, 0.1)
TTFT_AIM, ITL_AIM = 0.95, 0.90  # the attainment a configuration must reach to meet the SLO: TTFT budget, ITL
# The built-in autoscaler's targets where a scenario turns it on without its own (the benchmark's too).
BUILTIN_TARGETS = {"running_requests_per_replica": 16, "waiting_requests_per_replica": 4,
                   "ttft_p95_seconds": DEFAULT_SLO.ttft_s}


@dataclass
class Replica:
    engine: VirtualEngine
    created: float
    ready_at: float
    released: float | None = None
    draining: bool = False
    last_token: float = 0.0  # the last token it produced (a replica started after the load holds GPUs until then)
    endpoint: Endpoint | None = None  # what a routing policy sees of it


def quantile(values: list[float], q: float) -> float | None:
    """The `q` quantile of `values` as the benchmark has always read it (index int(q × n) of the sorted list)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Run:
    policy: str
    slo: Slo = field(default_factory=Slo)
    gpu_hours: float = 0.0
    ttft: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    budget_ok: int = 0  # TTFT within the allowance plus the request's own prefill floor
    itl_ok: int = 0
    scale_events: int = 0
    peak_replicas: int = 0
    cold_starts: int = 0
    finished: int = 0
    preemptions: int = 0  # of the finished requests, all together (read by the lab; not in `summary`)
    tokens: int = 0  # prompt and output tokens of the finished requests (the lab's cost per token)
    # With `window_s`: per window of arrival time, [arrivals, within the TTFT budget, within ITL] (in `summary`).
    window_s: float | None = None
    windows: dict[int, list[int]] = field(default_factory=dict)

    def summary(self, total: int) -> dict:
        """GPU-hours, SLO attainment over `total` requests (unfinished ones miss), latency quantiles, events."""

        def q(values, p):
            value = quantile(values, p)
            return None if value is None else round(value, 3)

        met = sum(1 for v in self.ttft if v <= self.slo.ttft_s)
        return {"gpu_hours": round(self.gpu_hours, 2),
                "slo_attainment": round(self.budget_ok / total, 4) if total else None,
                "ttft_abs_attainment": round(met / total, 4) if total else None,
                "itl_slo_attainment": round(self.itl_ok / total, 4) if total else None,
                "ttft_p50_s": q(self.ttft, 0.5), "ttft_p95_s": q(self.ttft, 0.95), "itl_p95_s": q(self.itl, 0.95),
                "scale_events": self.scale_events, "peak_replicas": self.peak_replicas,
                "cold_starts": self.cold_starts, **self._by_window()}

    def _by_window(self) -> dict:
        if not self.window_s:
            return {}
        return {"windows": [{"start_min": round(k * self.window_s / 60, 2), "requests": n,
                             "slo_attainment": round(budget / n, 4), "itl_slo_attainment": round(itl / n, 4)}
                            for k, (n, budget, itl) in sorted(self.windows.items())]}


class Simulation:
    """One policy over one load: arrivals, evaluations every period, replicas starting, serving and draining.

    `spec` is kubesim's EngineSpec of one replica (its `core` config and `startup_s` cold start), `gpus` the
    GPUs each replica holds; `lengths[i]` is the (prompt, output) tokens of the arrival at `arrivals[i]`."""

    def __init__(self, decide, arrivals, lengths, spec, hours: float, start_replicas: int = 1, *,
                 slo: Slo | None = None, gpus: int = 1, period_s: float = PERIOD_S, router_cap: int = ROUTER_CAP,
                 prefix_share: float = 0.0, prefix_groups: list[int] | None = None, routing: str = LEAST_LOADED,
                 scrape_s: float = SCRAPE_S, window_s: float | None = None):
        self.decide, self.arrivals, self.lengths, self.spec = decide, arrivals, lengths, spec
        # Which ready replica takes a request: the least loaded, else one of kubesim's router policies
        # (`kubesim.engines.routing`, the service proxy's and the simulated routers' own), fed each replica's load.
        self.router = None if routing == LEAST_LOADED else RoutingState(routing, use_local=False)
        # The share of each prompt's leading tokens that is one prefix common to all requests (a system
        # prompt): what an engine with prefix caching can hit. 0: no two prompts share a token.
        self.prefix_share = prefix_share
        # With `prefix_groups` (one per arrival), the prefix is its group's (requests of one prefix_id share it;
        # -1: the request shares nothing) rather than one common to all.
        self.prefix_groups = prefix_groups
        self.slo, self.gpus, self.period_s, self.router_cap = slo or Slo(), gpus, period_s, router_cap
        self.window_s = window_s  # attainment per window of arrival time too (`Run.windows`), when given
        self.end = hours * 3600
        self.cold_start = spec.startup_s
        self._replicas_made = 0
        self.replicas: list[Replica] = [self._replica(0.0, 0.0) for _ in range(start_replicas)]
        self.held: deque[int] = deque()
        self.first_token_at: list[tuple[float, float, float]] = []  # (first token at, TTFT, floor) for the guard
        self.itl_recent: list[tuple[float, float]] = []
        self._floors: dict[int, float] = {}
        self._roofline = self._engine(0.0).core.roofline  # the engine core's own step model
        self.last_active = 0.0
        self.queue_times: list[tuple[float, float]] = []  # (scheduled at, time waited in the engine's queue)
        self._arrived = [0, 0]  # arrivals and their prompt tokens since the last observation
        # Between evaluations a policy with `surge` sees each scrape (every `scrape_s`) and may scale up.
        self.scrape_s = scrape_s if getattr(decide, "surges", False) else None
        self._scraped = [0, 0, 0.0]  # arrivals, prompt tokens since the last scrape or observation, and its time
        self.cold_start_seen: float | None = None  # the latest replica's creation → ready time

    def _engine(self, at: float) -> VirtualEngine:
        return VirtualEngine(self.spec.core, start=at)

    def _replica(self, created: float, ready_at: float) -> Replica:
        self._replicas_made += 1
        name = f"replica-{self._replicas_made}"
        return Replica(self._engine(ready_at), created, ready_at, endpoint=Endpoint(name, f"http://{name}"))

    def live(self) -> list[Replica]:
        return [r for r in self.replicas if not r.draining]

    def ready(self, t: float) -> list[Replica]:
        return [r for r in self.live() if r.ready_at <= t]

    def _pick(self, t: float, index: int) -> Replica | None:
        """The ready replica the router sends arrival `index` to, among those with room under its cap (None: no
        room): the least loaded, else the routing policy's choice."""
        room = []
        for replica in self.ready(t):
            replica.engine.run_until(t)
            n = replica.engine.running + replica.engine.waiting
            if n < self.router_cap:
                room.append((replica, n))
        if not room:
            return None
        router = self.router
        if router is None:
            return min(room, key=lambda pair: pair[1])[0]
        by_url = {}
        for replica, n in room:
            url = replica.endpoint.base_url
            by_url[url] = replica
            router.scraped_load[url] = n
            router.scraped_kv[url] = replica.engine.kv_usage() if router.policy == "kv_aware" else 0.0
        return by_url[router.pick(self._request_info(index), [r.endpoint for r, _ in room]).base_url]

    def _request_info(self, index: int) -> RequestInfo:
        """What a router sees of an arrival: its prefix group as the session header, and (for the prefix policies)
        its prompt as text, the group's shared tokens first as the engine gets them."""
        group = None if self.prefix_groups is None else self.prefix_groups[index]
        headers = {} if group is None or group < 0 else {DEFAULT_SESSION_HEADER: f"session-{group}"}
        prompt = ""
        if self.router.policy in ("prefix_aware", "cache_aware"):
            prompt = " ".join(map(str, self._tokens(index)))
        return RequestInfo(headers=headers, prompt=prompt)

    def _tokens(self, index: int) -> list[int]:
        """Token ids of a request's own (no two prompts share a prefix, so prefix caching finds no false hits),
        after the common prefix's (negative ids, which no request's own tokens use) when there is one."""
        prompt = self.lengths[index][0]
        shared = int(prompt * self.prefix_share)
        group = 0 if self.prefix_groups is None else self.prefix_groups[index]
        if group < 0:
            shared = 0
        first, base = index * 1_000_003, -1 - group * 1_000_003
        return [base - k for k in range(shared)] + list(range(first, first + prompt - shared))

    def _send(self, replica: Replica, index: int, t: float) -> None:
        output = self.lengths[index][1]
        replica.engine.submit(Request(str(index), self._tokens(index), output, output), t)

    def _route(self, index: int, t: float) -> None:
        """Route an arrival: to the least loaded ready replica (round robin would pile onto one replica
        while others start), or into the router's queue behind earlier held requests when there is no
        ready replica or all are at the cap (as an activator / queue-proxy would)."""
        self._release_held(t)
        replica = None if self.held else self._pick(t, index)
        if replica is None:
            self.held.append(index)
        else:
            self._send(replica, index, t)

    def _release_held(self, t: float) -> None:
        while self.held:
            replica = self._pick(t, self.held[0])
            if replica is None:
                return
            self._send(replica, self.held.popleft(), t)

    def floor(self, prompt: int) -> float:
        """The prompt's prefill time alone on an idle replica, from the engine's own roofline (chunked as the
        engine chunks it): the part of TTFT that more replicas cannot shorten."""
        if prompt not in self._floors:
            self._floors[prompt] = self._roofline.prefill_seconds(prompt, self.spec.core.max_num_batched_tokens)
        return self._floors[prompt]

    def _collect(self, run: Run, replica: Replica) -> None:
        for req in replica.engine.take_finished():
            arrival = self.arrivals[int(req.request_id)]
            if req.first_token is None:
                continue
            ttft = req.first_token - arrival
            self.queue_times.append((req.first_scheduled, req.first_scheduled - req.arrival))
            floor = self.floor(req.prompt_len)
            run.ttft.append(ttft)
            run.budget_ok += ttft <= self.slo.ttft_s + floor
            self.first_token_at.append((req.first_token, ttft, floor))
            itl = (req.last_token - req.first_token) / max(req.generated - 1, 1)
            run.itl.append(itl)
            self.itl_recent.append((req.last_token, itl))
            run.itl_ok += itl <= self.slo.itl_s
            if run.window_s:
                counts = run.windows[int(arrival // run.window_s)]
                counts[1] += ttft <= self.slo.ttft_s + floor
                counts[2] += itl <= self.slo.itl_s
            run.finished += 1
            run.preemptions += req.preemptions
            run.tokens += req.prompt_len + req.generated
            replica.last_token = max(replica.last_token, req.last_token)

    def _scale_to(self, run: Run, n: int, t: float) -> None:
        live = self.live()
        if n > len(live):
            for _ in range(n - len(live)):
                self.replicas.append(self._replica(t, t + self.cold_start))
                run.cold_starts += 1
        elif n < len(live):
            # Not-ready replicas go first (newest first), then the least loaded ready ones.
            order = sorted(live, key=lambda r: (r.ready_at <= t, r.engine.running + r.engine.waiting, -r.created))
            for replica in order[: len(live) - n]:
                replica.draining = True
                if replica.ready_at > t:
                    replica.released = t

    def _settle(self, run: Run, t: float) -> None:
        """Bring every engine to `t`, collect finished requests, release drained replicas."""
        for replica in self.replicas:
            if replica.released is not None:
                continue
            if replica.ready_at <= t:
                replica.engine.run_until(t)
                self._collect(run, replica)
            if replica.draining and not replica.engine.busy:
                replica.released = max(replica.engine.vt, replica.ready_at) if replica.ready_at <= t else t

    def observe(self, t: float, scrape: bool = False) -> dict:
        """What an evaluation at `t` sees; `scrape`: what the latest scrape shows between evaluations (its own
        arrivals and queue times since the last scrape; latency over the period, as the stored series keep it)."""
        window = t - self.period_s
        recent = [v for at, v, _ in self.first_token_at if at > window]
        floors = [f for at, _, f in self.first_token_at if at > window]
        itl = [v for at, v in self.itl_recent if at > window]
        if not scrape:
            self.first_token_at = [x for x in self.first_token_at if x[0] > window]
            self.itl_recent = [x for x in self.itl_recent if x[0] > window]
        live = self.live()
        pods = tuple(PodSample(True, {"waiting_requests_per_replica": r.engine.waiting,
                                      "running_requests_per_replica": r.engine.running,
                                      "kv_cache_usage": r.engine.kv_usage()})
                     if r.ready_at <= t else PodSample(False, {}) for r in live)
        busy = any(r.engine.busy for r in live) or self.held
        if busy:
            self.last_active = t
        return {"t": t, "replicas": len(live), "pods": pods, "held": len(self.held),
                "ttft_p95": quantile(recent, 0.95), "ttft_floor_p95": quantile(floors, 0.95),
                "itl_p95": quantile(itl, 0.95), "idle_for": t - self.last_active, **self._load(t, live, scrape)}

    def _load(self, t: float, live: list[Replica], scrape: bool = False) -> dict:
        """What the engines' queue-time histogram and queues, and the router's arrivals, show for the period (or
        since the last scrape): queue time p95, prompt tokens not yet prefilled (engines and router), prompt
        tokens/s and arrivals/s."""
        since = self._scraped[2]
        window = since if scrape else t - self.period_s
        waits = [w for at, w in self.queue_times if at > window]
        waiting_tokens = sum(self.lengths[i][0] for i in self.held)
        for r in live:
            if r.ready_at > t:
                continue
            core = r.engine.core
            waiting_tokens += sum(q.prompt_len - q.num_computed for q in core.waiting)
            for q in core.running:
                if q.first_scheduled is not None and q.first_scheduled > window:
                    waits.append(q.first_scheduled - q.arrival)
                waiting_tokens += max(q.prompt_len - q.num_computed, 0)
        if not scrape:
            self.queue_times = []
        ready = [r for r in self.replicas if r.ready_at <= t and r.created < r.ready_at]
        if ready:
            latest = max(ready, key=lambda r: r.ready_at)
            self.cold_start_seen = latest.ready_at - latest.created
        arrived, tokens = self._scraped[:2] if scrape else self._arrived
        span = max(t - since, 1e-9) if scrape else self.period_s
        if not scrape:
            self._arrived = [0, 0]
        self._scraped = [0, 0, t]
        return {"queue_time_p95": quantile(waits, 0.95) if waits else 0.0, "waiting_prompt_tokens": waiting_tokens,
                "prompt_tps": tokens / span, "arrivals_per_s": arrived / span, "period_s": span,
                "cold_start": self.cold_start_seen}

    def run(self, name: str, timeline: list | None = None, cpu_deadline: float | None = None,
            on_tick=None) -> Run:
        """Replay the load; `timeline`, when given, receives (t, replicas, TTFT p95 of the period) per period.
        With `cpu_deadline` (a `time.process_time()` value) the replay stops with OverBudget once past it.
        `on_tick(t, end)`, when given, is called every period and every arrival (progress; it may raise to stop
        the replay)."""
        run = Run(name, self.slo, window_s=self.window_s)
        if self.window_s:
            for at in self.arrivals:
                run.windows.setdefault(int(at // self.window_s), [0, 0, 0])[0] += 1
        next_tick = self.period_s
        next_scrape = self.scrape_s or math.inf
        index, now = 0, 0.0
        arrivals = self.arrivals
        while True:
            t_arrival = arrivals[index] if index < len(arrivals) else math.inf
            # A replica becoming ready takes the requests the router holds at once, not at the next event.
            ready_next = min((r.ready_at for r in self.live() if now < r.ready_at <= min(t_arrival, next_tick)),
                             default=math.inf) if self.held else math.inf
            if abs(next_scrape - next_tick) < 1e-6:  # a scrape at an evaluation is that evaluation's
                next_scrape += self.scrape_s
            t = now = min(t_arrival, next_tick, ready_next, next_scrape)
            # An arrival at the very end is still served; requests the router still holds at the end (no replica,
            # or all at the cap) keep the evaluations going for up to DRAIN_S, so a fleet at zero activates for them.
            if t >= self.end and t_arrival > self.end and (not self.held or t > self.end + DRAIN_S):
                break
            if t == ready_next:
                self._release_held(t)
            elif t == next_scrape:
                self._evaluate(run, t, scrape=True)
                next_scrape += self.scrape_s
            elif t == t_arrival:
                self.last_active = t
                for counts in (self._arrived, self._scraped):
                    counts[0] += 1
                    counts[1] += self.lengths[index][0]
                self._route(index, t)
                index += 1
                if on_tick is not None:  # many arrivals may fall between two periods: progress and budgets here too
                    on_tick(t, self.end)
            else:
                state = self._evaluate(run, t)
                if timeline is not None:
                    timeline.append((t, len(self.live()), state["ttft_p95"]))
                if on_tick is not None:
                    on_tick(t, self.end)
                if cpu_deadline is not None and time.process_time() > cpu_deadline:
                    raise OverBudget(f"{name}: stopped at {t:.0f} s of {self.end:.0f} s of load, over the CPU budget")
                next_tick += self.period_s
        self._finish(run)
        return run

    def _evaluate(self, run: Run, t: float, scrape: bool = False) -> dict:
        """Bring the fleet to `t`, show the policy what it sees (at a scrape, to its surge check) and make the
        change it asks for; returns what it saw."""
        self._settle(run, t)
        self._release_held(t)
        state = self.observe(t, scrape)
        desired = (self.decide.surge if scrape else self.decide)(state, self.last_active)
        if desired != state["replicas"]:
            run.scale_events += 1
            self._scale_to(run, desired, t)
        run.peak_replicas = max(run.peak_replicas, len(self.live()))
        return state

    def _finish(self, run: Run) -> None:
        """Let the work in flight finish (GPUs stay held while it does), then account GPU time."""
        drain_until = self.end + DRAIN_S
        for replica in self.replicas:
            if replica.released is None and replica.ready_at <= drain_until:
                replica.engine.run_until(drain_until)
                self._collect(run, replica)
        for replica in self.replicas:
            stop = replica.released if replica.released is not None else self.end
            if replica.created >= self.end:  # started after the load for requests held at its end: until done
                stop = max(stop, replica.last_token, replica.ready_at)
            run.gpu_hours += self.gpus * max(stop - replica.created, 0.0) / 3600


def simulate(decide, arrivals, lengths, spec, hours, start_replicas=1, name="", **options) -> dict:
    run = Simulation(decide, arrivals, lengths, spec, hours, start_replicas, **options).run(name)
    return run.summary(len(arrivals))
