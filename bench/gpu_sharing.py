"""GPUs shared by priority and fair share (issue 40): three tenants' production and best-effort services on 16 L4s,
admitted by Kueue's policy (`capacity.kueue.admit`, the one definition kubesim's Kueue controller and the control
plane's own admission call) and placed by kubesim's scheduler (`kubesim.cluster.placement`), on a simulated clock.

    .venv/bin/python bench/gpu_sharing.py [--hours H] [--seed S] [--json]

The setting: kubesim nodes `l4-24gb:4x4`; tenants acme, globex and initech with nominal quotas of 6, 6 and 4 L4 in
one cohort, equal weights, lending and borrowing without limits. Each tenant runs a production service (priority
1000; a replica is a multi-GPU group of two single-L4 pods, admitted whole and placed all or nothing) under the
demo's chat load (kubesim.loadgen's `diurnal`), and a best-effort service (priority 0, one L4 per replica) under
the demo's steady `poisson` load, at LOADS requests per second. Each pass (every 15 s, as the autoscaler
evaluates) a service wants as many replicas as its last minute of arrivals needs at REPLICA_RPS per GPU (a stand-in
for the autoscaler); the pass admits, preempts and leaves waiting; pods of admitted workloads are placed at the next
scheduling cycle, on GPUs that preempted pods have freed once drained (in-flight requests finish within the
terminationGracePeriodSeconds; requests sent to a gone pod go to another replica or are answered 503 with
retry-after by the gateway, as gateway/upstream.py does, each counted: the gateway is modelled, not run).

The same run with today's hard quotas gives `utilisation_hard_quota`: each tenant's services capped at maximum
replicas adding up to its quota (`hard_max`), nothing lent or borrowed.
`--json` ends with one line: {"utilisation", "utilisation_hard_quota", "preemption_seconds", "preempted_in_quota",
"partial_groups", "fair_share_max_deviation", "lost_requests", ..., "hard_quota": {the same figures of that run}}.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
from bisect import bisect_left
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from capacity import kueue
from capacity.gpus import GPUS
from kubesim.cluster.nodes import build_nodes
from kubesim.cluster.placement import FitError, NodeUsage, place_gang
from kubesim.loadgen import arrival_times

GPU = "l4-24gb"
NODES = f"{GPU}:4x4"
TENANTS = (("acme", 6), ("globex", 6), ("initech", 4))
CLASSES = {"production": 1000, "best-effort": 0}
# (class, pods per replica, load pattern): the demo's chat and RAG load shapes.
SERVICES = (("production", 2, "diurnal"), ("best-effort", 1, "poisson"))
# Mean requests/s of each tenant's production and best-effort services: a heavy, a middling and a light tenant.
LOADS = {"acme": (3.0, 8.0), "globex": (3.0, 5.0), "initech": (2.0, 2.0)}
REPLICA_RPS = 1.0  # requests per second one L4 serves at the demo's lengths
PASS_S = 15.0  # an admission pass with each autoscaler evaluation
SCHEDULING_S = 1.0  # one scheduling cycle
DEMAND_WINDOW_S = 60.0
REQUEST_S = 6.0  # the demo's longest chat answer (200 tokens at ~30 ms each): a preempted pod drains within it
GRACE_S = 60.0  # terminationGracePeriodSeconds of engine pods (apps/serving/rendering/pods.py)
FAIR_WINDOW_S = 300.0
MAX_REPLICAS = 16


@dataclass
class Replica:
    """One wanted replica of a service: its workload while pending or admitted, its pods once placed."""

    workload: kueue.Workload
    asked: float  # when the service first wanted it (the scale-up)
    pods: dict[str, str] = field(default_factory=dict)  # pod name -> node
    bind_at: float | None = None  # admitted: placed at this scheduling cycle
    free_at: float | None = None  # preempted: its GPUs free once drained
    preemptor: bool = False  # its admission preempted someone


@dataclass
class Figures:
    """What one run measured."""

    util_num: float = 0.0
    util_den: float = 0.0
    ticks: int = 0
    ticks_over: int = 0  # seconds the load wanted more GPUs than there are
    preemption_waits: list[float] = field(default_factory=list)
    preempted: int = 0
    preempted_in_quota: int = 0
    preempted_production: int = 0
    partial_group_seconds: set[str] = field(default_factory=set)
    drained: int = 0
    retried: int = 0
    answered_503: int = 0
    lost: int = 0
    windows: list[dict] = field(default_factory=list)


def pod(name: str) -> dict:
    """An engine pod asking for one L4, tolerating the GPU nodes' taint, as rendering makes them."""
    return {"metadata": {"name": name, "namespace": "bench"},
            "spec": {"nodeSelector": {"nvidia.com/gpu.product": GPUS[GPU].product},
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                     "containers": [{"name": "engine", "resources": {
                         "requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}


def demand(hours: float, seed: int) -> dict[str, list[float]]:
    """Arrival times of each service (tenant/class), from the demo's load shapes."""
    rng = random.Random(seed)
    return {f"{tenant}/{klass}": arrival_times(pattern, rate, hours * 3600, rng)
            for tenant, _ in TENANTS for (klass, _, pattern), rate in zip(SERVICES, LOADS[tenant], strict=True)}


def wanted(arrivals: list[float], t: float, pods: int) -> int:
    """Replicas the last minute of arrivals needs (at least one)."""
    rate = (bisect_left(arrivals, t) - bisect_left(arrivals, t - DEMAND_WINDOW_S)) / DEMAND_WINDOW_S
    return max(1, min(MAX_REPLICAS, math.ceil(rate / (REPLICA_RPS * pods))))


def hard_max(tenant: str, klass: str) -> int:
    """Today's hard quota counts GPUs at maximum replicas: a tenant's services' maxima add up to its quota, about
    half of it for production (whole groups) and the rest for best-effort."""
    quota = dict(TENANTS)[tenant]
    groups = math.ceil(quota / 4)
    return groups if klass == "production" else quota - 2 * groups


def queues(hard: bool) -> list[kueue.Queue]:
    limit = {GPU: 0} if hard else {}
    return [kueue.Queue(name=t, cohort="bench", nominal={GPU: n}, borrowing_limit=limit, lending_limit=limit)
            for t, n in TENANTS]


def fair_shares(want: dict[str, int]) -> dict[str, float]:
    """Each tenant's weighted fair share of the 16 L4 (equal weights): its nominal quota as far as it wants it,
    the rest of the cohort's GPUs water-filled among those wanting more."""
    nominal = dict(TENANTS)
    share = {t: float(min(want[t], nominal[t])) for t in nominal}
    spare = sum(nominal.values()) - sum(share.values())
    while spare > 1e-9:
        hungry = [t for t in share if want[t] > share[t] + 1e-9]
        if not hungry:
            break
        each = spare / len(hungry)
        for t in hungry:
            take = min(each, want[t] - share[t])
            share[t] += take
            spare -= take
    return share


def run(hours: float, seed: int, hard: bool) -> Figures:
    arrivals = demand(hours, seed)
    nodes = build_nodes(NODES)
    allocatable = sum(int(n["status"]["allocatable"].get("nvidia.com/gpu", 0)) for n in nodes)
    replicas: dict[str, list[Replica]] = {s: [] for s in arrivals}
    draining: list[Replica] = []
    figures = Figures()
    window: dict[str, list[float]] = {t: [0.0, 0.0] for t, _ in TENANTS}
    window_start, window_backlogged = 0.0, True
    t, end = 0.0, hours * 3600
    while t < end:
        if t % PASS_S == 0:
            want = admission_pass(t, arrivals, replicas, draining, hard, figures)
        draining[:] = [r for r in draining if r.free_at > t]
        bind(t, nodes, [*draining, *(r for rs in replicas.values() for r in rs)], figures)
        held = {tn: sum(len(r.pods) for s, rs in replicas.items() if s.startswith(tn + "/") for r in rs)
                for tn, _ in TENANTS}
        wanted_gpus = {tn: sum(w for s, w in want.items() if s.startswith(tn + "/")) for tn, _ in TENANTS}
        figures.ticks += 1
        if sum(wanted_gpus.values()) > allocatable:
            figures.ticks_over += 1
            figures.util_num += sum(held.values())
            figures.util_den += allocatable
        fair = fair_shares(wanted_gpus)
        # Backlogged: every tenant wants more than its nominal quota.
        window_backlogged &= all(wanted_gpus[tn] > nominal for tn, nominal in TENANTS)
        for tn in window:
            window[tn][0] += held[tn]
            window[tn][1] += fair[tn]
        t += SCHEDULING_S
        if t - window_start >= FAIR_WINDOW_S:
            if window_backlogged:
                figures.windows.append({tn: (h, f) for tn, (h, f) in window.items()})
            window = {tn: [0.0, 0.0] for tn in window}
            window_start, window_backlogged = t, True
    return figures


def admission_pass(t: float, arrivals, replicas: dict[str, list[Replica]], draining: list[Replica], hard: bool,
                   figures: Figures) -> dict:
    """Scale each service to what its load wants, then one pass of the policy; returns GPUs wanted per service."""
    want = {}
    for service, rs in replicas.items():
        tenant, klass = service.split("/")
        pods = dict((k, p) for k, p, _ in SERVICES)[klass]
        n = wanted(arrivals[service], t, pods)
        want[service] = n * pods  # the load's need, whatever the quota lets the service have
        if hard:
            n = min(n, hard_max(tenant, klass))
        del rs[n:]  # scaled in: the newest replicas go (their GPUs free at once)
        for i in range(len(rs), n):
            rs.append(Replica(kueue.Workload(key=f"{service}/{i}", queue=tenant, priority=CLASSES[klass],
                                             priority_class=klass, flavor=GPU, gpus=pods, created=t, admitted=False),
                              asked=t))
    live = [r for rs in replicas.values() for r in rs if r.free_at is None]
    usage = {tn: sum(r.workload.gpus for r in live if r.workload.admitted and r.workload.queue == tn)
             for tn, _ in TENANTS}
    plan = kueue.admit(queues(hard), [r.workload for r in live], capacity={GPU: 16})
    for r in live:
        w = r.workload
        if w.key in plan.preempted:
            figures.preempted += 1
            if w.priority_class == "production":
                figures.preempted_production += 1
                figures.preempted_in_quota += usage[w.queue] <= dict(TENANTS)[w.queue]
            draining.append(preempt(t, r, replicas, figures))
        elif w.key in plan.admitted and not w.admitted:
            r.workload = kueue.Workload(**{**w.__dict__, "admitted": True, "admitted_at": t})
            r.bind_at = t + SCHEDULING_S
            # A production scale-up that took someone's GPUs: its wait is the aim's figure.
            r.preemptor = w.priority_class == "production" and any(p.by == w.key for p in plan.preempted.values())
    return want


def preempt(t: float, r: Replica, replicas: dict[str, list[Replica]], figures: Figures) -> Replica:
    """Evict a replica: its in-flight requests drain within the grace period (or are cut: lost), the gateway sends
    new ones elsewhere or answers 503 with retry-after; the replica itself waits for quota again."""
    service = r.workload.key.rsplit("/", 1)[0]
    in_flight = max(1, round(REPLICA_RPS * r.workload.gpus * REQUEST_S))
    if r.pods:
        figures.drained += in_flight if REQUEST_S <= GRACE_S else 0
        figures.lost += in_flight if REQUEST_S > GRACE_S else 0
        others = [o for o in replicas[service] if o is not r and o.pods]
        # Requests sent in the scheduling cycle before the gateway's snapshot drops the pod are refused by it.
        refused = round(REPLICA_RPS * r.workload.gpus * SCHEDULING_S)
        if others:
            figures.retried += refused
        else:
            figures.answered_503 += refused
    rs = replicas[service]
    index = rs.index(r)
    freed = Replica(kueue.Workload(**{**r.workload.__dict__, "admitted": False, "admitted_at": None, "created": t}),
                    asked=t)
    r.free_at = t + REQUEST_S  # drained: its GPUs free
    rs[index] = freed
    return r


def bind(t: float, nodes: list[dict], everyone: list[Replica], figures: Figures) -> None:
    """One scheduling cycle: admitted groups are placed all or nothing on the GPUs that pods (draining ones too)
    do not hold."""
    usage: dict[str, NodeUsage] = {}
    for r in everyone:
        for node in r.pods.values():
            usage[node] = usage.get(node, NodeUsage()).plus({"nvidia.com/gpu": 1})
    for r in sorted(everyone, key=lambda r: (-r.workload.priority, r.asked)):
        if r.bind_at is None or r.bind_at > t or r.pods or r.free_at is not None:
            continue
        names = [f"{r.workload.key.replace('/', '-')}-{i}" for i in range(r.workload.gpus)]
        try:
            placement = place_gang([pod(n) for n in names], nodes, usage)
        except FitError:
            continue
        r.pods = placement
        for node in placement.values():
            usage[node] = usage.get(node, NodeUsage()).plus({"nvidia.com/gpu": 1})
        if r.preemptor:
            figures.preemption_waits.append(t - r.asked)
    for r in everyone:
        if 0 < len(r.pods) < r.workload.gpus:
            figures.partial_group_seconds.add(r.workload.key)


def summary(figures: Figures) -> dict:
    """One run's figures under the issue's names, and the counts behind them."""
    deviations = [abs(h - f) / f for w in figures.windows for h, f in w.values() if f]
    return {
        "utilisation": round(figures.util_num / figures.util_den, 3) if figures.util_den else None,
        "preemption_seconds": max(figures.preemption_waits, default=None),
        "preempted_in_quota": figures.preempted_in_quota,
        "partial_groups": len(figures.partial_group_seconds),
        "fair_share_max_deviation": round(max(deviations), 3) if deviations else None,
        "lost_requests": figures.lost,
        "demand_above_supply": round(figures.ticks_over / figures.ticks, 3) if figures.ticks else None,
        "preempted": figures.preempted,
        "preempted_production": figures.preempted_production,
        "preemptions_waited_for": len(figures.preemption_waits),
        "aim_preemption_seconds": PASS_S + SCHEDULING_S,
        "fair_windows": len(figures.windows),
        "requests_drained": figures.drained,
        "requests_retried": figures.retried,
        "requests_503_retry_after": figures.answered_503,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    out, hard = summary(run(args.hours, args.seed, hard=False)), summary(run(args.hours, args.seed, hard=True))
    out = {"utilisation": out.pop("utilisation"), "utilisation_hard_quota": hard["utilisation"], **out,
           "hard_quota": hard}
    for key, value in out.items():
        print(f"{key:28} {value}")
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
