"""`manage.py engine_stats URL [--interval S] [--json]`: one engine's figures over one interval.

An operator's tool, built from the same functions the scraper worker uses (`scrape`, `figures`).
"""

from __future__ import annotations

import argparse
import json
import math
import time

from django.core.management.base import BaseCommand, CommandError

from apps.telemetry.exposition import NotAnEngineExposition
from apps.telemetry.figures import figures
from apps.telemetry.scrape import ScrapeError, metrics_url, scrape

# (label, key, format) rows of the human-readable table.
TABLE_ROWS = (
    ("TTFT p50", "ttft_p50_s", "seconds"),
    ("TTFT p95", "ttft_p95_s", "seconds"),
    ("TTFT p99", "ttft_p99_s", "seconds"),
    ("Inter-token p50", "itl_p50_s", "seconds"),
    ("Inter-token p95", "itl_p95_s", "seconds"),
    ("KV-cache usage", "kv_cache_usage", "percent"),
    ("Running requests", "running", "count"),
    ("Waiting requests", "waiting", "count"),
    ("Prefix-cache hit rate", "prefix_cache_hit_rate", "percent"),
    ("Prompt tokens/s", "prompt_tokens_per_s", "rate"),
    ("Generation tokens/s", "generation_tokens_per_s", "rate"),
    ("Preemptions", "preemptions", "count"),
    ("Success rate", "success_rate", "percent"),
)


def _format(value: float | None, kind: str) -> str:
    if value is None:
        return "-"
    if kind == "seconds":
        return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.3f} s"
    if kind == "percent":
        return f"{value * 100:.1f} %"
    if kind == "count":
        return f"{value:g}"
    return f"{value:.1f}"


def _positive_float(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{raw!r} is not a positive number of seconds")
    return value


class Command(BaseCommand):
    help = (
        "Scrape one vLLM or SGLang engine's /metrics twice, --interval seconds apart, and print TTFT, "
        "inter-token latency, KV-cache usage, queues, prefix-cache hit rate and token throughput."
    )

    def add_arguments(self, parser):
        parser.add_argument("url", help="engine base URL (http://host:8000) or its /metrics URL")
        parser.add_argument(
            "--interval", type=_positive_float, default=5.0, help="seconds between the scrapes (default 5)"
        )
        parser.add_argument("--timeout", type=_positive_float, default=5.0, help="HTTP timeout per scrape")
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args, **options):
        interval = options["interval"]
        try:
            url = metrics_url(options["url"])
            first = scrape(url, options["timeout"])
            time.sleep(interval)
            second = scrape(url, options["timeout"])
            result = figures(first, second)
        except ScrapeError as exc:
            raise CommandError(f"cannot scrape metrics: {exc}") from exc
        except NotAnEngineExposition as exc:
            raise CommandError(f"{options['url']} is not a vLLM or SGLang metrics endpoint: {exc}") from exc
        except ValueError as exc:
            raise CommandError(str(exc)) from exc

        if options["json"]:
            self.stdout.write(json.dumps(result.engine_stats()))
            return
        data = result.as_dict()
        self.stdout.write(f"{result.engine} · {result.model or 'unknown model'} · {url}")
        self.stdout.write(f"interval {result.interval_s:.2f} s")
        width = max(len(label) for label, _, _ in TABLE_ROWS)
        for label, key, kind in TABLE_ROWS:
            self.stdout.write(f"  {label:<{width}}  {_format(data[key], kind)}")
