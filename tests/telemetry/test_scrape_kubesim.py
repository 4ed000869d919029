"""The scraper end to end against kubesim: services reconciled onto simulated GPU nodes, load sent through
the service proxy, `/metrics` read through the API server's pod proxy, figures stored in PostgreSQL."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import psycopg
from django.db import connection

from apps.telemetry.models import SERVICE_ROLE, PodStat, ScrapeCycle, SeriesPoint
from tests.polling import wait_for
from tests.telemetry.conftest import proxy_base, requests_running, send_load
from workers.telemetry import LOCK_NAMESPACE, scrape_all


def rows(service, role=SERVICE_ROLE):
    return list(SeriesPoint.objects.filter(service=service, role=role).order_by("time"))


def test_first_scrape_counts_ready_replicas_and_has_no_interval_figures_yet(deploy, tenant_a):
    service = deploy(tenant_a, "chat")

    [report] = scrape_all()

    assert (report.pods, report.errors) == (2, 0)
    [point] = rows(service)
    assert point.ready_replicas == 2
    # One scrape is no interval: no latency quantiles or rates until the second one.
    assert point.ttft_p95 is None and point.gen_tps is None
    assert PodStat.objects.filter(service=service, figures__isnull=True, snapshot__isnull=False).count() == 2


def test_load_drives_ttft_and_kv_figures_into_the_database(deploy, tenant_a, sim):
    service = deploy(tenant_a, "chat")
    scrape_all()
    usages = send_load(sim, service, requests=16, concurrency=8, max_tokens=16)
    # Long generations still decoding at the second scrape hold KV-cache blocks and count as running.
    background = threading.Thread(target=send_load, args=(sim, service), kwargs={"requests": 8, "max_tokens": 400})
    background.start()
    # Scrape once an engine reports some of them running (polled, not slept: the machine may be slow).
    wait_for(lambda: requests_running(sim, service) > 0, message="requests running")
    scrape_all()
    background.join(60)

    first, second = rows(service)
    interval = (second.time - first.time).total_seconds()
    assert second.ready_replicas == 2
    assert 0 < second.ttft_p50 <= second.ttft_p95 <= second.ttft_p99 < 5
    assert 0 < second.itl_p50 <= second.itl_p95 < 1
    assert second.kv_usage > 0 and second.running >= 1
    assert second.success_rate == 1.0
    # At least the 16 finished requests' completion tokens were generated in the interval (the background
    # ones add more), so the rate is at least their total over the interval plus the scrape skew.
    generated = sum(u["completion_tokens"] for u in usages)
    assert second.gen_tps >= generated / (interval + 0.5)
    pods = PodStat.objects.filter(service=service)
    assert sorted(p.role for p in pods) == ["engine", "engine"]
    assert all(p.node.startswith("gpu-h100") and p.figures["ttft_p95_s"] is not None for p in pods)


def test_pd_services_get_a_row_per_pool_and_one_for_the_whole_service(deploy, tenant_a, sim):
    service = deploy(
        tenant_a, "split", deployment_mode="pd_disaggregated", routing_policy="round_robin",
        pools=[{"role": "prefill", "replicas": 1, "gpu_type": "h100-sxm-80gb"},
               {"role": "decode", "replicas": 2, "gpu_type": "h100-sxm-80gb"}],
    )
    scrape_all()
    send_load(sim, service, requests=6, concurrency=3)
    scrape_all()

    latest = {p.role: p for p in SeriesPoint.objects.filter(service=service).order_by("time")}
    assert set(latest) == {"", "prefill", "decode"}
    assert (latest[""].ready_replicas, latest["prefill"].ready_replicas, latest["decode"].ready_replicas) == (3, 1, 2)
    # Decode pods generate the tokens; the service total is the sum of the pools' rates.
    assert latest["decode"].gen_tps > 0
    assert abs(latest[""].gen_tps - (latest["decode"].gen_tps + latest["prefill"].gen_tps)) < 1e-3 * latest[""].gen_tps


def test_a_dead_engine_costs_one_timeout_and_never_slows_the_others(deploy, tenant_a, sim, settings):
    settings.TELEMETRY_SCRAPE_TIMEOUT_SECONDS = 1
    service = deploy(tenant_a, "chat", pools=[{"role": "engine", "replicas": 3, "gpu_type": "h100-sxm-80gb"}])
    scrape_all()
    stuck = PodStat.objects.filter(service=service).order_by("pod").first().pod
    # The API server holds this pod's metrics requests for 20 s, as a wedged engine would.
    body = json.dumps({"latency_ms": 20000, "path_contains": f"/pods/{stuck}:"}).encode()
    request = urllib.request.Request(f"{sim.url}/kubesim/faults", data=body, method="PATCH",
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=10).close()

    started = time.monotonic()
    [report] = scrape_all()
    elapsed = time.monotonic() - started

    assert (report.pods, report.errors) == (3, 1)
    assert elapsed < 1 + 1.5  # one timeout plus the cycle's own work, not 20 s
    stats = {p.pod: p for p in PodStat.objects.filter(service=service)}
    assert stats[stuck].error and all(not p.error and p.figures for name, p in stats.items() if name != stuck)
    assert rows(service)[-1].ready_replicas == 3
    cycle = ScrapeCycle.objects.latest("started_at")
    assert (cycle.total_cycles, cycle.total_pods, cycle.total_errors) == (2, 6, 1)


def test_pods_that_are_gone_lose_their_latest_figures(deploy, tenant_a):
    service = deploy(tenant_a, "chat")
    scrape_all()
    other = deploy(tenant_a, "other", pools=[{"role": "engine", "replicas": 1, "gpu_type": "h100-sxm-80gb"}])
    PodStat.objects.create(service=other, pod="other-gone-abcde", role="engine", scraped_at=service.created)

    scrape_all()

    assert PodStat.objects.filter(service=service).count() == 2
    assert list(PodStat.objects.filter(service=other).values_list("pod", flat=True)) != ["other-gone-abcde"]
    assert not PodStat.objects.filter(pod="other-gone-abcde").exists()


def test_a_cycle_is_skipped_while_another_worker_scrapes_the_same_cluster(deploy, tenant_a, sim_cluster):
    service = deploy(tenant_a, "chat")
    db = connection.settings_dict
    with psycopg.connect(host=db["HOST"], port=db["PORT"] or 5432, user=db["USER"], password=db["PASSWORD"],
                         dbname=db["NAME"], autocommit=True) as other_worker:
        other_worker.execute("SELECT pg_advisory_lock(%s, %s)", [LOCK_NAMESPACE, sim_cluster.pk])

        [report] = scrape_all()

        assert report.skipped and report.pods == 0
        assert not SeriesPoint.objects.filter(service=service).exists()
    # The other worker's connection closed, so its lock went with it; the server drops it as the backend
    # exits, a moment after the client closes, so wait for that rather than race it.
    def lock_released():
        with connection.cursor() as cur:
            # This database's lock only: another test database (another xdist worker's) may hold its own.
            cur.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND objid = %s "
                        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                        [LOCK_NAMESPACE, sim_cluster.pk])
            return cur.fetchone()[0] == 0

    wait_for(lock_released, message="the closed connection's advisory lock to be released")
    [report] = scrape_all()
    assert not report.skipped and rows(service)[0].ready_replicas == 2


def test_sglang_engines_are_scraped_on_their_own_port_with_their_own_names(deploy, tenant_a, sim):
    service = deploy(tenant_a, "qwen", engine="sglang",
                     pools=[{"role": "engine", "replicas": 1, "gpu_type": "h100-sxm-80gb"}])
    scrape_all()
    usages = send_load(sim, service, requests=8, concurrency=4)
    scrape_all()

    point = rows(service)[-1]
    assert point.ready_replicas == 1
    assert 0 < point.ttft_p50 <= point.ttft_p95 < 5
    # SGLang exports no preemption counter; its success rate comes from num_requests and aborts.
    assert point.preemptions is None and point.success_rate == 1.0
    [stat] = PodStat.objects.filter(service=service)
    assert stat.snapshot["engine"] == "sglang"
    generated = sum(u["completion_tokens"] for u in usages)
    assert point.gen_tps * stat.figures["interval_s"] >= generated * 0.99


def test_queue_time_and_prompt_tokens_waiting_come_from_the_engines_histograms(deploy, tenant_a, sim):
    # One engine running one sequence at a time and 10 identical prompts sent at once: the others wait for the
    # slot. The engine exports no waiting queue's tokens; the scraper estimates them as the requests waiting ×
    # the mean prompt of the requests finished in the interval (the prompt-length histogram's sum over its
    # count), which for identical prompts is exactly their length.
    service = deploy(tenant_a, "queued", engine_settings={"max_num_seqs": 1},
                     pools=[{"role": "engine", "replicas": 1, "gpu_type": "h100-sxm-80gb"}])
    base, model = proxy_base(sim, service), service.model.name
    body = json.dumps({"model": model, "prompt": "Summarise the plan in one line. " * 40, "max_tokens": 100,
                       "ignore_eos": True}).encode()
    usages = []

    def one(_):
        request = urllib.request.Request(f"{base}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            usages.append(json.loads(response.read())["usage"])

    clients = [threading.Thread(target=one, args=(i,)) for i in range(10)]
    for client in clients:
        client.start()
    scrape_all()

    def queued_figures():
        scrape_all()
        figures = PodStat.objects.get(service=service).figures or {}
        return figures if figures.get("waiting") and figures.get("waiting_prompt_tokens") is not None else None

    figures = wait_for(queued_figures, timeout=120, message="an interval with requests finished and others waiting")
    for client in clients:
        client.join(120)
    prompt = usages[0]["prompt_tokens"]
    assert {u["prompt_tokens"] for u in usages} == {prompt}
    assert figures["waiting_prompt_tokens"] == figures["waiting"] * prompt
    assert figures["queue_time_p95_s"] > 0  # a finished request past the first waited for the slot
    assert figures["requests_per_s"] > 0
    # The prompt-length p95 lies in the 1-2-5 bucket that holds the prompt's length.
    bounds = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]
    upper = next(b for b in bounds if b >= prompt)
    assert bounds[bounds.index(upper) - 1] < figures["prompt_tokens_p95"] <= upper
