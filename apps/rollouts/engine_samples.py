"""Samples for the canary analysis from the engines' own histograms, for a window in which the gateway metered no
requests of one revision or both (nobody calls the service through the gateway, or its router names no engine).

The scraper keeps each revision's histogram increments per interval during a rollout (`RevisionIncrement`,
apps/telemetry/revisions.py); summed over the window they are turned into one sample per request the engines
served, so `apps.rollouts.analysis.analyse` judges them with the same arithmetic and confidence bounds as metered
requests:
- TTFT: one value per request that got a first token, the histogram's quantiles at (i + ½) / n (PromQL's linear
  interpolation inside a bucket, `apps.telemetry.figures`), so the p95 of the samples is the histogram's p95;
- ITL: the inter-token histogram counts tokens, not requests; the same n quantiles of it stand for the requests;
- errors: each request the engine aborted or failed is one more sample, an error without a TTFT;
- preemptions are spread over the requests, and each sample carries the window's mean prompt and cached tokens (so
  the prefix-cache hit rate reported beside TTFT is the engines').

What histograms cannot give is the pairing of a request's prompt length with its TTFT, so such a window compares
TTFT over all requests (`ENGINE_BUCKETS`: no prompt-length buckets) and its decision says so.
"""

from __future__ import annotations

import math

from apps.rollouts.analysis import Sample
from apps.telemetry.figures import histogram_quantiles
from apps.telemetry.revisions import EngineWindow

ENGINE_BUCKETS: tuple[int, ...] = ()  # TTFT compared over all requests: histograms do not pair it with prompt length


def samples_from_window(window: EngineWindow) -> list[Sample]:
    """One sample per request the revision's engines served in the window (see the module's docstring)."""
    n = round(window.ttft_buckets.get(math.inf, 0.0))
    errors = round(window.failed)
    if n <= 0 and errors <= 0:
        return []
    qs = [(i + 0.5) / n for i in range(n)]
    ttfts = histogram_quantiles(qs, window.ttft_buckets) if n else []
    itls = histogram_quantiles(qs, window.itl_buckets) if n and window.itl_buckets else [None] * n
    requests = max(window.finished, n + errors, 1)
    prompt = round(window.prompt_tokens / requests)
    cached = round(window.cached_tokens / requests)
    preempted = round(window.preemptions)
    each, extra = divmod(preempted, n) if n else (0, 0)
    samples = [Sample(prompt_tokens=prompt, ttft_s=ttft, itl_s=itl, cached_tokens=cached,
                      preemptions=each + (1 if i < extra else 0))
               for i, (ttft, itl) in enumerate(zip(ttfts, itls, strict=True))]
    samples += [Sample(prompt_tokens=prompt, ttft_s=None, cached_tokens=cached, error=True)] * errors
    return samples
