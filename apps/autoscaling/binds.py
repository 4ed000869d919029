"""What would meet the SLO where a pool's maximum binds: the autoscaler's decision says it in words, and the answer
comes from the what-if lab's search (`apps.whatif.limits`), a layer above the autoscaler. The lab registers its
answer here when Django loads it (`apps.whatif.apps`), so the autoscaler reads a stored search through this hook
and imports nothing of the lab. Without a lab loaded the decision says only that the maximum binds."""

from __future__ import annotations

from collections.abc import Callable

# service -> the lab's sentence for it ("" where it has not searched yet); None: no lab is loaded.
_ANSWER: list[Callable[[object], str]] = []


def answer_with(answer: Callable[[object], str]) -> None:
    """Register what answers 'what would meet the SLO' for a service (the lab's latest search, in words)."""
    _ANSWER[:] = [answer]


def what_would_meet(service) -> str:
    """The words a binding decision ends with: the lab's answer for `service` ("" with no lab loaded)."""
    return _ANSWER[0](service) if _ANSWER else ""
