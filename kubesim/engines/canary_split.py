"""Weighted split of a router's requests between revisions during a canary rollout.

The control plane annotates the router pod with `<revision>=<percent>` (enginevocab.labels); the pods labelled
with that revision get that share of the requests, the other pods the rest. The split is a deterministic
interleave, not a coin: of the first n requests exactly ⌊n·percent/100⌋ go to the canary, so a 5 % step never
sends it more than 5 %. While one side has no ready pod the requests go to the other, and that side is owed
nothing afterwards (no burst when it comes back).
"""

from __future__ import annotations

from enginevocab.labels import REVISION_LABEL, parse_canary_weights
from kubesim.workload import Endpoint


class RevisionSplit:
    """One router's split: `choose(endpoints)` narrows the ready endpoints to the revision this request goes to."""

    def __init__(self, annotation: str | None):
        self.percent = parse_canary_weights(annotation)
        self.requests = 0
        self.sent = dict.fromkeys(self.percent, 0)

    def __bool__(self) -> bool:
        return bool(self.percent)

    def revision_of(self, ep: Endpoint) -> str | None:
        """The canary revision an endpoint belongs to, or None for a stable one."""
        revision = ep.labels.get(REVISION_LABEL)
        return revision if revision in self.percent else None

    def choose(self, endpoints: list[Endpoint]) -> str | None:
        """The revision the next request goes to (None: stable)."""
        if not self.percent:
            return None
        self.requests += 1
        present = {self.revision_of(ep) for ep in endpoints}
        for revision, percent in self.percent.items():
            due = self.requests * percent // 100
            if self.sent[revision] < due:
                if revision in present or None not in present:
                    self.sent[revision] += 1
                    return revision
                self.sent[revision] = due  # no canary pod ready: the request goes to stable, owed nothing
        if None in present or not present:
            return None
        revision = next(iter(present))  # no stable pod ready: the canary serves
        self.sent[revision] += 1
        return revision

    def narrow(self, revision: str | None, *lists: list[Endpoint]) -> tuple[list[Endpoint], ...]:
        """Each list cut to the endpoints of `revision` (None: stable)."""
        return tuple([ep for ep in eps if self.revision_of(ep) == revision] for eps in lists)
