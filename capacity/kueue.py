"""Kueue's admission policy, pure: which workloads hold GPU quota, which wait (and why), which are preempted.

One definition for both sides (issue 40): kubesim's Kueue controller and the control plane's own admission on
clusters without Kueue call `admit` with the same queues and workloads and get the same answer. It follows
Kueue's documented semantics for a ClusterQueue per tenant in a cohort, one resource (GPUs) per flavor:
- nominal quota per flavor; a queue borrows its cohort's unused lendable quota up to its `borrowingLimit`, and
  lends at most its `lendingLimit` (the rest is guaranteed to it);
- pending workloads are tried in queue order (priority, then creation), BestEffortFIFO: a head that does not fit
  lets the next one try; between queues, the one that would borrow the least (weighted share, fair sharing)
  goes first, then priority, then creation;
- preemption: `withinClusterQueue` lets a higher priority evict lower ones of its queue; `reclaimWithinCohort`
  lets a workload that fits its queue's nominal quota evict workloads of queues using more than their nominal
  quota; `borrowWithinCohort` lets a borrowing workload evict lower-priority borrowers. Candidates go other
  queues first, lowest priority first, most recently admitted first; the smallest such set is evicted;
- admitted workloads keep their quota unless preempted; a workload (a whole multi-GPU group) is admitted whole.

Standard library only (capacity is pure); the words it returns are the ones the service page shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from capacity.gpus import GPUS

# Preemption policies, as Kueue spells them.
# Kueue's API as its objects spell it: one definition for the renderer, the read-back and kubesim's Kueue.
GROUP = "kueue.x-k8s.io"
VERSION = "v1beta1"
COHORT_VERSION = "v1alpha1"
QUEUE_LABEL = f"{GROUP}/queue-name"
PRIORITY_LABEL = f"{GROUP}/priority-class"

NEVER = "Never"
LOWER_PRIORITY = "LowerPriority"
LOWER_OR_NEWER_EQUAL = "LowerOrNewerEqualPriority"
ANY = "Any"
# The reasons of Kueue's Preempted condition.
IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"


@dataclass(frozen=True)
class Queue:
    """A tenant's ClusterQueue: nominal GPUs per flavor, limits (None = unlimited / all unused), weight, policies."""

    name: str
    cohort: str
    nominal: Mapping[str, int]
    borrowing_limit: Mapping[str, int | None] = field(default_factory=dict)
    lending_limit: Mapping[str, int | None] = field(default_factory=dict)
    weight: float = 1.0
    reclaim_within_cohort: str = ANY
    borrow_within_cohort: str = NEVER


@dataclass(frozen=True)
class Workload:
    """One engine replica (a pod, or a whole multi-node group, admitted all or nothing) asking for GPUs."""

    key: str  # "namespace/name"
    queue: str
    priority: int
    priority_class: str
    flavor: str
    gpus: int
    created: float
    admitted: bool
    preemption: str = LOWER_PRIORITY  # withinClusterQueue: Never | LowerPriority | LowerOrNewerEqualPriority
    admitted_at: float | None = None  # when quota was reserved (None: use `created`)


@dataclass(frozen=True)
class Admitted:
    """Holds quota; `borrowed` says from which lender queues (GPUs each); `new` when admitted by this plan."""

    borrowed: dict[str, int]
    new: bool = False


@dataclass(frozen=True)
class Preempted:
    """Evicted by this plan: by whom, Kueue's condition reason, and the sentence people read."""

    by: str
    reason: str
    kind: str = IN_CLUSTER_QUEUE


@dataclass(frozen=True)
class Waiting:
    """Pending: 1-based position in its queue and the reason in words."""

    position: int
    reason: str


@dataclass
class Plan:
    """The outcome of one pass: every workload is in exactly one of the three."""

    admitted: dict[str, Admitted] = field(default_factory=dict)
    preempted: dict[str, Preempted] = field(default_factory=dict)
    waiting: dict[str, Waiting] = field(default_factory=dict)


def gpu_word(flavor: str) -> str:
    """What sentences call a flavor: the GPU's short name ("L4") when it is a known GPU kind."""
    gpu = GPUS.get(flavor)
    return gpu.short if gpu else flavor


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def queue_order(w: Workload) -> tuple:
    """Kueue's order inside a queue: higher priority first, then older."""
    return (-w.priority, w.created, w.key)


class _Books:
    """GPUs in use per queue and flavor, and the quota arithmetic of a cohort (Kueue's lendable pool)."""

    def __init__(self, queues: Mapping[str, Queue], capacity: Mapping[str, int] | None):
        self.queues = queues
        self.capacity = capacity
        self.holding: dict[str, Workload] = {}
        self.usage: dict[tuple[str, str], int] = {}

    def add(self, w: Workload) -> None:
        self.holding[w.key] = w
        self.usage[w.queue, w.flavor] = self.used(w.queue, w.flavor) + w.gpus

    def remove(self, w: Workload) -> None:
        del self.holding[w.key]
        self.usage[w.queue, w.flavor] -= w.gpus

    def used(self, q: str, f: str) -> int:
        return self.usage.get((q, f), 0)

    def nominal(self, q: str, f: str) -> int:
        return self.queues[q].nominal.get(f, 0)

    def guaranteed(self, q: str, f: str) -> int:
        """The part of the nominal quota the queue does not lend."""
        lend = self.queues[q].lending_limit.get(f)
        return 0 if lend is None else max(0, self.nominal(q, f) - lend)

    def members(self, q: str) -> list[str]:
        cohort = self.queues[q].cohort
        return [m for m, queue in self.queues.items() if cohort and queue.cohort == cohort] or [q]

    def borrowed(self, q: str, f: str) -> int:
        return max(0, self.used(q, f) - self.nominal(q, f))

    def cohort_free(self, q: str, f: str) -> int:
        """Lendable GPUs of the cohort not in use beyond its members' guaranteed quota."""
        members = self.members(q)
        pool = sum(self.nominal(m, f) - self.guaranteed(m, f) for m in members)
        return pool - sum(max(0, self.used(m, f) - self.guaranteed(m, f)) for m in members)

    def cluster_free(self, f: str) -> int | None:
        if self.capacity is None:
            return None
        return self.capacity.get(f, 0) - sum(n for (_, fl), n in self.usage.items() if fl == f)

    def shortfall(self, w: Workload) -> str | None:
        """None when `w` fits now; else why not, in words."""
        q, f, word = w.queue, w.flavor, gpu_word(w.flavor)
        queue = self.queues[q]
        limit = queue.borrowing_limit.get(f)
        after = self.used(q, f) + w.gpus
        if limit is not None and after > self.nominal(q, f) + limit:
            return (f"{q}'s queue may hold at most {self.nominal(q, f) + limit} {word} (nominal "
                    f"{self.nominal(q, f)} + borrowing limit {limit}) and holds {self.used(q, f)}")
        need = max(0, after - self.guaranteed(q, f)) - max(0, self.used(q, f) - self.guaranteed(q, f))
        free = self.cohort_free(q, f)
        if need > free:
            where = "the cohort" if queue.cohort else f"{q}'s queue"
            if not self.nominal(q, f) and free <= 0:
                return f"{q}'s queue has no {word} quota and {where} has no free {word}"
            if free <= 0:
                return f"{where} has no free {word}"
            return f"{where} has {free} free {word}, it needs {w.gpus}"
        cluster = self.cluster_free(f)
        if cluster is not None and w.gpus > cluster:
            return f"the cluster has no free {word}" if cluster <= 0 else f"the cluster has {cluster} free {word}"
        return None

    def share(self, q: str, f: str) -> float:
        """Kueue's weighted share for one flavor: GPUs borrowed over the cohort's lendable GPUs, over the weight."""
        pool = sum(self.nominal(m, f) - self.guaranteed(m, f) for m in self.members(q)) or 1
        weight, borrowed = self.queues[q].weight, self.borrowed(q, f)
        if weight <= 0:  # a queue of weight 0 borrows only what nobody else wants
            return float("inf") if borrowed else 0.0
        return borrowed / (pool * weight)  # one rounding, so equal shares compare equal


def _candidates(books: _Books, w: Workload) -> list[tuple[Workload, str]]:
    """Admitted workloads `w` may evict, in Kueue's order, each with its Preempted reason."""
    q, queue = w.queue, books.queues[w.queue]
    within_nominal = books.used(q, w.flavor) + w.gpus <= books.nominal(q, w.flavor)
    out = []
    for c in books.holding.values():
        if c.flavor != w.flavor or c.key == w.key:
            continue
        if c.queue == q:
            newer = c.priority == w.priority and (c.admitted_at or c.created) > w.created
            if (w.preemption in (LOWER_PRIORITY, LOWER_OR_NEWER_EQUAL) and c.priority < w.priority) or (
                    w.preemption == LOWER_OR_NEWER_EQUAL and newer):
                out.append((c, IN_CLUSTER_QUEUE))
        elif c.queue in books.members(q):  # only while that queue borrows: checked as candidates go
            reclaim = queue.reclaim_within_cohort
            if within_nominal and (reclaim == ANY or (reclaim == LOWER_PRIORITY and c.priority < w.priority)):
                out.append((c, IN_COHORT_RECLAMATION))
            elif queue.borrow_within_cohort == LOWER_PRIORITY and c.priority < w.priority:
                out.append((c, IN_COHORT_RECLAIM_WHILE_BORROWING))
    # Other queues first, then lowest priority, then most recently admitted.
    out.sort(key=lambda cr: (cr[0].queue == q, cr[0].priority, -(cr[0].admitted_at or cr[0].created), cr[0].key))
    return out


def _preemptions(books: _Books, w: Workload) -> list[tuple[Workload, str]] | None:
    """The smallest set of candidates whose eviction lets `w` fit (None: none does); books are left unchanged."""
    removed: list[tuple[Workload, str]] = []
    for c, kind in _candidates(books, w):
        # A borrower stops being a candidate of the cohort once it no longer borrows.
        if kind != IN_CLUSTER_QUEUE and books.borrowed(c.queue, c.flavor) <= 0:
            continue
        books.remove(c)
        removed.append((c, kind))
        if books.shortfall(w) is None:
            break
    else:
        for c, _ in removed:
            books.add(c)
        return None
    # Put back whoever is not needed, latest removal first, except the one that made room.
    needed = [removed[-1]]
    for c, kind in reversed(removed[:-1]):
        books.add(c)
        if books.shortfall(w) is None:
            continue
        books.remove(c)
        needed.append((c, kind))
    for c, _ in removed:
        if c.key not in books.holding:
            books.add(c)
    return needed


def _preempted_words(c: Workload, w: Workload, kind: str) -> str:
    sign = ">" if w.priority > c.priority else "=" if w.priority == c.priority else "<"
    why = {
        IN_CLUSTER_QUEUE: f"within {w.queue}'s queue",
        IN_COHORT_RECLAMATION: f"to reclaim {w.queue}'s nominal quota",
        IN_COHORT_RECLAIM_WHILE_BORROWING: f"to borrow for {w.queue}'s queue",
    }[kind]
    return f"preempted by {w.key} ({w.priority_class} {w.priority} {sign} {c.priority_class} {c.priority}) {why}"


def _attribute(books: _Books) -> dict[str, dict[str, int]]:
    """Which lenders each admitted workload borrows from: a queue's workloads in queue order fill its nominal
    quota first; what lies beyond is taken from the other members' unused lendable quota, by name."""
    lent: dict[tuple[str, str], int] = {}
    out: dict[str, dict[str, int]] = {}
    by_queue: dict[str, list[Workload]] = {}
    for w in books.holding.values():
        by_queue.setdefault(w.queue, []).append(w)
    for q in sorted(by_queue):
        filled: dict[str, int] = {}
        for w in sorted(by_queue[q], key=queue_order):
            f = w.flavor
            before = filled.get(f, 0)
            filled[f] = before + w.gpus
            over = max(0, filled[f] - books.nominal(q, f)) - max(0, before - books.nominal(q, f))
            taken: dict[str, int] = {}
            for m in sorted(books.members(q)):
                if m == q or over <= 0:
                    continue
                spare = min(books.nominal(m, f) - books.guaranteed(m, f), books.nominal(m, f) - books.used(m, f))
                n = min(over, spare - lent.get((m, f), 0))
                if n > 0:
                    taken[m], lent[m, f], over = n, lent.get((m, f), 0) + n, over - n
            out[w.key] = taken
    return out


def admit(queues: Iterable[Queue], workloads: Iterable[Workload], *,
          capacity: Mapping[str, int] | None = None) -> Plan:
    """One admission pass over every queue: the plan of who holds quota, who is evicted and who waits (and why).

    `capacity` (flavor -> GPUs on the nodes) caps what all queues together hold, for clusters whose nominal
    quotas add up to more than their GPUs."""
    by_name = {q.name: q for q in queues}
    books = _Books(by_name, capacity)
    workloads = list(workloads)
    pending: dict[str, list[Workload]] = {}
    plan = Plan()
    for w in workloads:
        if w.queue not in by_name:
            continue
        if w.admitted:
            books.add(w)
        else:
            pending.setdefault(w.queue, []).append(w)
    for ws in pending.values():
        ws.sort(key=queue_order)
    new: set[str] = set()
    for _ in range(4 * len(workloads) + 1):  # each pass admits one; an eviction can return one (bounded churn)
        heads = []
        for ws in pending.values():
            for w in ws:  # BestEffortFIFO: the first of the queue that can be admitted, with preemption or not
                evict = [] if books.shortfall(w) is None else _preemptions(books, w)
                if evict is not None:
                    books.add(w)
                    fair = books.share(w.queue, w.flavor)
                    books.remove(w)
                    heads.append(((fair, -w.priority, w.created, w.key), w, evict))
                    break
        if not heads:
            break
        _, w, evict = min(heads, key=lambda h: h[0])
        for c, kind in evict:
            books.remove(c)
            if c.key in new:  # admitted earlier in this pass: it simply waits again
                new.discard(c.key)
                pending[c.queue].append(c)
                pending[c.queue].sort(key=queue_order)
            else:
                plan.preempted[c.key] = Preempted(by=w.key, reason=_preempted_words(c, w, kind), kind=kind)
        books.add(w)
        new.add(w.key)
        pending[w.queue].remove(w)
    for key, lenders in _attribute(books).items():
        plan.admitted[key] = Admitted(borrowed=lenders, new=key in new)
    for q, ws in pending.items():
        for i, w in enumerate(ws, 1):
            plan.waiting[w.key] = Waiting(i, f"{ordinal(i)} in {q}'s queue; {books.shortfall(w) or 'waiting its turn'}")
    for w in workloads:
        if w.queue not in by_name:
            plan.waiting[w.key] = Waiting(1, f"no queue named {w.queue!r}")
    return plan
