"""Tuning advice cards on the service page: what each confirmed piece of advice read, suggests and is predicted to
do, with a link that opens the lab with its scenario filled in (the rules are `apps.whatif.advice`)."""

from __future__ import annotations

import json
from urllib.parse import urlencode

from django.urls import reverse

from apps.whatif.models import Advice

FIGURE_LABELS = {"preemptions": "preemptions", "itl_p95_s": "ITL p95 (s)", "gpu_hours": "GPU-hours",
                 "cost_usd": "cost of the load (USD)", "slo_attainment": "SLO attainment",
                 "ttft_p95_s": "TTFT p95 (s)", "ttft_p50_s": "TTFT p50 (s)"}
INPUT_LABELS = {"kv_max": "peak KV-cache usage", "preemptions": "preemptions", "ttft_p95": "TTFT p95 (s, mean)",
                "itl_p95": "ITL p95 (s, mean)", "replicas": "ready replicas (mean)",
                "prompt_tps": "prompt tokens/s (mean)", "gen_tps": "generated tokens/s (mean)",
                "prefix_hit_rate": "prefix-cache hit rate (mean)",
                "running_per_replica": "running requests a replica (mean)",
                "running_per_replica_max": "running requests a replica (peak)"}


def advice_cards(service) -> list[dict]:
    """The service's shown advice as the page draws it: inputs, the change, the lab's effect and its link."""
    cards = []
    for advice in Advice.objects.filter(service=service, dismissed_at__isnull=True).order_by("rule"):
        change = {k: v for k, v in advice.alternative.items() if k != "name"}
        p = advice.predicted
        cards.append({
            "advice": advice,
            "inputs": [(INPUT_LABELS.get(k, k), v) for k, v in advice.inputs.items() if v is not None],
            "change": ", ".join(f"{k} {json.dumps(v)}" for k, v in change.items()),
            "effect": f"{FIGURE_LABELS.get(p['figure'], p['figure'])}: {p['current']} → {p['suggested']} "
                      f"({p['effect_pct']} % better, replayed on {p['requests']} recorded requests)",
            "lab_url": reverse("web:lab", args=[service.tenant.slug, service.name]) + "?"
            + urlencode({"alternatives": json.dumps([advice.alternative])}),
        })
    return cards
