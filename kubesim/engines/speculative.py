"""Speculative decoding's pieces of the engine model: the assumed acceptances, what `--speculative-config` resolves
to, the draft model's share of a step, and the acceptance engines report turned back into the model's."""

from __future__ import annotations

from dataclasses import dataclass

from capacity import arch as cap
from capacity import roofline

# The chance that a drafted token is accepted, where the pod does not say (`kubesim.io/spec-acceptance`): assumptions
# (docs/whatif.md), which the lab replaces with the rate a service's engines report. An n-gram's depends on how
# much of the output repeats the prompt (high when summarising or editing code, low in open chat); a small model of
# the same family drafting for a larger one is accepted more often.
NGRAM_ACCEPTANCE = 0.5
DRAFT_MODEL_ACCEPTANCE = 0.7
DRAFT_ARCH_ANNOTATION = "kubesim.io/draft-model-arch"


def acceptance_for_rate(rate: float, k: int) -> float:
    """The chance a drafted token is accepted that gives an engine's reported acceptance rate (accepted over
    drafted tokens) with k drafts a step: the inverse of `spec_yield`, by bisection (it rises with the chance)."""
    rate = min(max(rate, 0.0), 1.0)
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if (roofline.spec_yield(k, mid) - 1) / k < rate else (lo, mid)
    return round((lo + hi) / 2, 4)


@dataclass
class Speculative:
    """`--speculative-config` as the engine runs it: drafted tokens a step, their acceptance, and the draft model
    whose forward passes draft them (None: n-gram drafting, a lookup in the prompt)."""

    tokens: int = 0
    acceptance: float = 0.0
    draft: cap.ModelArch | None = None


def draft_seconds(draft: roofline.Roofline, batch) -> float:
    """A draft model's share of a step of `batch` ((request, tokens) pairs): it runs the step's prompt chunks too, to
    keep its own KV, and then one forward pass per drafted token over the sequences drafting that many (vLLM's
    draft-model proposer drafts autoregressively). A decoding request scheduled for n tokens drafts n - 1."""
    chunks, drafting = [], []
    for req, n in batch:
        if req.num_computed == req.num_tokens - 1 and req.generated:
            drafting.append((req.num_computed, n - 1))
        else:
            chunks.append((req.num_computed, n))
    t = draft.step_time(chunks, []) if chunks else 0.0
    for j in range(max((d for _, d in drafting), default=0)):
        t += draft.step_time([], [ctx + j for ctx, d in drafting if d > j])
    return t
