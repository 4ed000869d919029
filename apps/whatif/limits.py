"""Capacity limits explained: a service whose engine pool sits at its maximum while missing its SLO says so, with
the answer of its latest search (`apps.whatif.search`) beside it; the service page, its advice and the fleet page
read these sentences."""

from __future__ import annotations

from apps.whatif.models import Run, RunStatus
from apps.whatif.search import ITL_AIM, TTFT_AIM


def latest_searches(service_ids) -> dict[int, Run]:
    """Each service's newest finished search with a result."""
    runs = (Run.objects.filter(service_id__in=list(service_ids), search=True, status=RunStatus.SUCCEEDED,
                               result__isnull=False)
            .order_by("service_id", "-created").distinct("service_id"))
    return {r.service_id: r for r in runs}


def answer_words(run: Run) -> str:
    """'at the load of run #12, 2 × L4 (TP 1), 1–6 replicas, meets 97 % at 3.1 GPU-h; today's configuration
    meets 0.4 %' (or why nothing replayed met the SLO)."""
    result = run.result
    load = "at last hour's load" if run.trace_id is None else f"at trace {run.trace.name}'s load"
    chosen, current = result.get("chosen"), result.get("current")
    today = f"; today's configuration meets {current['slo_attainment']:.1%}" if current else ""
    if chosen is None:
        return f"{load}, {result.get('reason')}{today}"
    return (f"{load}, {chosen['name']}, meets {chosen['slo_attainment']:.1%} (ITL {chosen['itl_slo_attainment']:.1%}) "
            f"at {chosen['gpu_hours']:.2f} GPU-h{today}")


def search_answer(service) -> str:
    """What a decision of the autoscaler says where the service's maximum binds: its latest search's answer, or
    how to run one."""
    run = latest_searches([service.pk]).get(service.pk)
    if run is None:
        return (f"the what-if lab has not searched this service yet (manage.py whatif --service "
                f"{service.tenant.slug}/{service.name} --search answers what would meet the SLO)")
    return f"the what-if lab's search (run #{run.pk}) answers: {answer_words(run)}"


def missing(attainment: dict | None) -> str | None:
    """The figure under its aim, in words ('TTFT budget met by 0.4 %, aim 95 %'), or None when none is."""
    if attainment is None:
        return None
    ttft = attainment["ttft_budget"] if attainment["ttft_budget"] is not None else attainment["ttft_abs"]
    if ttft < TTFT_AIM:
        return f"TTFT met by {ttft:.1%} of requests, aim {TTFT_AIM:.0%}"
    if attainment["itl"] is not None and attainment["itl"] < ITL_AIM:
        return f"ITL met by {attainment['itl']:.1%} of requests, aim {ITL_AIM:.0%}"
    return None


def capacity_limits(services, attainments: dict[int, dict]) -> dict[int, dict]:
    """{service id: {"words", "answer", "run"}} for the services whose engine pool is at its maximum replicas
    while the last hour misses an SLO aim; `answer` is the latest search's sentence (None: no search yet)."""
    limited = {}
    for s in services:
        pool = next((p for p in s.pools.all() if p.role == "engine"), None)
        short = missing(attainments.get(s.pk))
        if pool is None or short is None or pool.replicas < pool.max_replicas:
            continue
        limited[s.pk] = {"words": f"At its maximum of {pool.max_replicas} replicas and missing its SLO ({short}): "
                                  "the maximum binds."}
    searches = latest_searches(limited)
    for pk, entry in limited.items():
        run = searches.get(pk)
        entry |= {"run": run, "answer": None if run is None else answer_words(run)}
    return limited
