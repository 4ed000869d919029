"""Node-local model copies within a disk budget, least recently used evicted first (the model agent's rule).

Pure bookkeeping shared by kubesim's model agent and the control plane's prefetch plan: which models a node's
disk holds, which to evict to make room for another, and whether a budget fits the disk.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from capacity.startup import size

# The model agent's Event reasons on a Node, and their messages: one spelling for kubesim's agent, the agent that runs
# on real clusters (workers/modelagent.py) and the node page that reads them back.
COMPONENT = "model-agent"
COPYING, COPIED, EVICTED, NOT_COPIED = "ModelCopying", "ModelCopied", "ModelEvicted", "ModelNotCopied"


def copying_message(model: str, nbytes: int) -> str:
    return f"copying {model} ({size(nbytes)}) to the node's disk"


def copied_message(model: str, nbytes: int, used: int, budget: int) -> str:
    return f"{model} ({size(nbytes)}) held on the node; {size(used)} of {size(budget)} used"


def evicted_message(old: str, model: str) -> str:
    return f"evicted {old} (least recently used) to make room for {model}"


class BudgetError(ValueError):
    """A budget or a model that cannot fit; `field` names the input at fault."""

    def __init__(self, field_name: str, message: str):
        super().__init__(message)
        self.field = field_name


def check_budget(budget_bytes: int, disk_bytes: int) -> None:
    """A cache budget must be positive and at most the node's disk."""
    if budget_bytes <= 0:
        raise BudgetError("cache_budget_bytes", "must be positive")
    if budget_bytes > disk_bytes:
        raise BudgetError("cache_budget_bytes",
                          f"{budget_bytes:,} bytes is more than the node's disk of {disk_bytes:,} bytes")


@dataclass
class NodeDisk:
    """The models one node's disk holds (name -> bytes), oldest use first, within `budget_bytes`."""

    budget_bytes: int
    held: OrderedDict[str, int] = field(default_factory=OrderedDict)

    @property
    def used_bytes(self) -> int:
        return sum(self.held.values())

    def touch(self, model: str) -> None:
        """A pod read the model from this disk: it becomes the most recently used."""
        if model in self.held:
            self.held.move_to_end(model)

    def plan(self, model: str, nbytes: int, pinned: frozenset[str] = frozenset()) -> list[str]:
        """The models to evict, least recently used first, so that `model` fits; BudgetError when it cannot
        (larger than the budget, or room only by evicting `pinned` models, e.g. ones a running pod reads)."""
        if model in self.held:
            return []
        if nbytes > self.budget_bytes:
            raise BudgetError("model", f"{model} ({nbytes:,} bytes) is larger than the node's cache budget "
                                       f"({self.budget_bytes:,} bytes)")
        free, evict = self.budget_bytes - self.used_bytes, []
        for name, held in self.held.items():
            if free >= nbytes:
                break
            if name in pinned:
                continue
            evict.append(name)
            free += held
        if free < nbytes:
            raise BudgetError("model", f"no room for {model} on the node without evicting models in use")
        return evict

    def admit(self, model: str, nbytes: int, pinned: frozenset[str] = frozenset()) -> list[str]:
        """Hold `model`, evicting as `plan` says; returns the evicted models."""
        evict = self.plan(model, nbytes, pinned)
        for name in evict:
            del self.held[name]
        self.held[model] = nbytes
        self.held.move_to_end(model)
        return evict


def prefetch_nodes(candidates: list[tuple[str, int]], wanted: int, nbytes: int) -> list[str]:
    """Up to `wanted` node names to copy a model of `nbytes` to: the candidates (name, free budget bytes) with
    room, the most free first (ties by name), so a scale-up lands on warm nodes."""
    fitting = sorted((c for c in candidates if c[1] >= nbytes), key=lambda c: (-c[1], c[0]))
    return [name for name, _ in fitting[:max(0, wanted)]]
