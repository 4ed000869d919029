"""The scaling policies a fleet replay (`apps.whatif.fleet.Simulation`) runs: `decide(state, last_active) ->
replicas`, each deciding with the control plane's own rules (`apps.autoscaling.rules`), never a copy. The built-in
autoscaler also sees each scrape between its evaluations (`surge`)."""

from __future__ import annotations

from apps.autoscaling.rules import (
    History,
    Observation,
    evaluate,
    external_replicas,
    metric_replicas,
    normalize,
    record_scale,
)
from apps.autoscaling.surge import surge
from apps.serving.scaling_policy import PoolPolicy
from capacity.roofline import ReplicaRates, replica_rates
from kubesim.engines.virtual import VirtualEngine


def spec_rates(spec) -> ReplicaRates:
    """A replica's rates (prefill tokens/s, decode step) for the autoscaler's signals, from kubesim's EngineSpec:
    the engine core's own roofline, chunked by its batched-token budget."""
    return replica_rates(VirtualEngine(spec.core).core.roofline, spec.core.max_num_batched_tokens)


# --- policies: `decide(state, last_active) -> replicas` ---------------------------------------------------------


class Builtin:
    """The built-in autoscaler: `apps.autoscaling.rules.evaluate` with the pool's policy, and with the replica's rates
    the surge check at each scrape between evaluations (`apps.autoscaling.surge`), as the control plane runs both."""

    def __init__(self, policy: PoolPolicy, floor_aware: bool = False, rates=None):
        self.policy = policy
        # With the replica's rates (capacity.roofline.ReplicaRates) the rules also see the signals replicas can
        # change (queue time, prefill backlog and load, decode pressure, the forecast) and the prefill floor.
        self.rates = rates
        # True: the rules see the prompts' prefill floor and judge TTFT by the part above it (an experiment the
        # live autoscaler does not run yet: its telemetry does not measure the floor).
        self.floor_aware = floor_aware
        self.history = History()
        self.cold_start: float | None = None

    @property
    def surges(self) -> bool:
        """Whether it checks each scrape between evaluations (`surge`): with the replica's rates."""
        return self.rates is not None

    def _observation(self, s: dict) -> Observation:
        floor = s["ttft_floor_p95"] if self.floor_aware or self.rates else None
        load = {}
        if self.rates is not None:
            load = {"rates": self.rates, "queue_time_p95_s": s["queue_time_p95"],
                    "waiting_prompt_tokens": s["waiting_prompt_tokens"], "prompt_tokens_per_s": s["prompt_tps"],
                    "arrivals_per_s": s["arrivals_per_s"], "cold_start_s": s["cold_start"]}
        return Observation(**{"t": s["t"], "replicas": s["replicas"], "pods": s["pods"], "ttft_p95_s": s["ttft_p95"],
                              "ttft_floor_p95_s": floor, "itl_p95_s": s["itl_p95"], "idle_for_s": s["idle_for"],
                              "pending_activation": s["held"], "cold_start_s": self.cold_start,
                              "period_s": s["period_s"], **load})

    def _made(self, ev) -> int:
        self.history = ev.history
        if ev.changes:
            self.history = record_scale(self.history, ev.t, ev.current, ev.desired, self.policy.longest_period_s)
        return ev.desired

    def __call__(self, s: dict, last_active: float) -> int:
        return self._made(evaluate(self.policy, self._observation(s), self.history))

    def surge(self, s: dict, last_active: float) -> int:
        ev = surge(self.policy, self._observation(s), self.history)
        return s["replicas"] if ev is None else self._made(ev)


class Hpa:
    """An HPA (or KEDA's HPA) with default behavior on one metric: `raw(state) → recommendation`."""

    def __init__(self, raw, policy: PoolPolicy):
        self.policy = policy
        self.history = History()
        self.raw = raw

    def __call__(self, s: dict, last_active: float) -> int:
        current = s["replicas"]
        if current < self.policy.min_replicas:
            return self.policy.min_replicas
        _, limited, self.history, _, _ = normalize(self.policy, self.history, s["t"], current, self.raw(s))
        if limited != current:
            self.history = record_scale(self.history, s["t"], current, limited, self.policy.longest_period_s)
        return limited


def hpa_policy(min_replicas: int, max_replicas: int) -> PoolPolicy:
    """An HPA with no tuning: Kubernetes' default behavior and tolerance."""
    return PoolPolicy(min_replicas=min_replicas, max_replicas=max_replicas, metrics=())


def keda_queue(threshold: float, min_replicas: int = 1, max_replicas: int = 16) -> Hpa:
    """KEDA on sum(vllm:num_requests_waiting) against `threshold`, as vLLM Production Stack configures it."""
    def raw(s):
        total = sum(p.metrics.get("waiting_requests_per_replica", 0) for p in s["pods"] if p.ready)
        return external_replicas(total, threshold, s["replicas"], 0.1)
    return Hpa(raw, hpa_policy(min_replicas, max_replicas))


def hpa_kv(target: float = 0.8, min_replicas: int = 1, max_replicas: int = 16) -> Hpa:
    """An HPA on KV-cache usage per pod."""
    def raw(s):
        return metric_replicas("kv_cache_usage", target, s["replicas"], s["pods"], 0.1).replicas or s["replicas"]
    return Hpa(raw, hpa_policy(min_replicas, max_replicas))


class Fixed:
    """A fixed fleet: no autoscaler."""

    def __init__(self, n: int):
        self.n = n

    def __call__(self, s: dict, last_active: float) -> int:
        return self.n
