"""A pool's steady load and then a step, as the stored telemetry shows them: shared by the surge tests against
PostgreSQL, the scrape's check and a real worker."""

from __future__ import annotations

from datetime import timedelta

from apps.autoscaling.evaluate import evaluate_service
from apps.telemetry.figures import Figures
from apps.telemetry.models import PodStat


def pods_at(service, prompt_tps: float, at, requests_per_s=lambda i: 1.5) -> None:
    """Both pods of the service scraped at `at`, each prefilling `prompt_tps`, nothing waiting."""
    for i in range(2):
        PodStat.objects.update_or_create(service=service, pod=f"{service.name}-{i}", defaults={
            "role": "engine", "scraped_at": at, "figures": {
                "waiting": 0, "running": 1, "kv_cache_usage": 0.1, "prompt_tokens_per_s": prompt_tps,
                "requests_per_s": requests_per_s(i), "waiting_prompt_tokens": 0.0}})


def steady_then(service, rate: float, start, evaluations: int = 10):
    """Ten periodic evaluations 15 s apart of 2 pods carrying 0.1 × the replica's prefill rate each, 1.5 requests/s
    with little spread (their history: the smoothed load, the arrival counts); returns the time of the last."""
    for k in range(evaluations):
        at = start + timedelta(seconds=15 * k)
        pods_at(service, 0.1 * rate, at - timedelta(seconds=2), lambda i, k=k: 1.5 + 0.1 * ((k + i) % 2))
        evaluate_service(service.pk, now=at)
    return at


def scraped(prompt_tps: float, waiting_tokens: float = 0.0) -> Figures:
    """A scrape's service-wide figures: only the prompt tokens/s and the prompt tokens waiting are known."""
    unknown = dict.fromkeys(("ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "itl_p50_s", "itl_p95_s", "kv_cache_usage",
                             "running", "waiting", "prefix_cache_hit_rate", "generation_tokens_per_s", "preemptions",
                             "success_rate"))
    return Figures(engine="vllm", model=None, interval_s=5.0, pods=2, prompt_tokens_per_s=prompt_tps,
                   waiting_prompt_tokens=waiting_tokens, **unknown)
