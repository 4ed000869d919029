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
- prompt lengths: with the per-request prompt-length histogram (`vllm:request_prompt_tokens`,
  `sglang:prompt_tokens_histogram`), the same n quantiles of it, paired by rank with the TTFTs (the i-th shortest
  TTFT with the i-th shortest prompt), each with the window's prefix-cache hit rate applied to it; without it, the
  window's mean prompt on every sample;
- preemptions are spread over the requests.

Histograms do not pair a request's prompt length with its TTFT. Pairing by rank assumes what the engine's work
makes nearly so, that a longer prompt to prefill takes longer to its first token; it is exact when TTFT grows with
the prompt and only approximate where queueing or noise reorders them, the same on both sides. So a canary that got
longer prompts is compared per prompt-length bucket under stable's mix, as metered requests are (`paired`), and a
window whose engines export no prompt histogram on either side compares TTFT over all requests (`ENGINE_BUCKETS`:
no prompt-length buckets). The decision says which.
"""

from __future__ import annotations

import math

from apps.rollouts.analysis import Sample
from apps.telemetry.figures import histogram_quantiles
from apps.telemetry.revisions import EngineWindow

ENGINE_BUCKETS: tuple[int, ...] = ()  # TTFT compared over all requests: no prompt histogram to pair it with


def paired(window: EngineWindow) -> bool:
    """Whether the window's requests can carry their own prompt lengths: the engines exported the per-request
    prompt-length histogram and it counted requests in the window."""
    return len(window.prompt_buckets) >= 2 and window.prompt_buckets.get(math.inf, 0.0) > 0


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
    hit_rate = window.cached_tokens / window.prompt_tokens if window.prompt_tokens else 0.0
    # histogram_quantiles returns the n quantiles in rising order, so the i-th TTFT meets the i-th prompt.
    prompts = [round(p) for p in histogram_quantiles(qs, window.prompt_buckets)] if n and paired(window) \
        else [prompt] * n
    preempted = round(window.preemptions)
    each, extra = divmod(preempted, n) if n else (0, 0)
    samples = [Sample(prompt_tokens=length, ttft_s=ttft, itl_s=itl,
                      cached_tokens=round(length * hit_rate) if paired(window) else cached,
                      preemptions=each + (1 if i < extra else 0))
               for i, (ttft, itl, length) in enumerate(zip(ttfts, itls, prompts, strict=True))]
    samples += [Sample(prompt_tokens=prompt, ttft_s=None, cached_tokens=cached, error=True)] * errors
    return samples
