"""The what-if lab's speed, memory and fidelity.

    .venv/bin/python bench/whatif.py [--hours H] [--rate R] [--seed S] [--fidelity-seconds T] [--json]

Speed: one hour of a 5 requests/s Poisson trace (about 18,000 requests; prompts log-normal around 600 tokens,
outputs uniform 50-200, as the demo's load) replayed by the lab against the demo's chat service (Llama-3.1-8B
on NVIDIA L4s, prefix caching) and 7 alternatives: 8 scenarios on one core, each through the lab's own code
(`apps.whatif.lab`: the renderer's engine, kubesim's engine cores on a simulated clock). The speed-up of a
scenario is the load's length over the CPU time its replay took (the replaying thread's: "on one core", and on
a machine shared with other work the wall clock also counts the time other processes held the core);
`speedup` is all 8 together (8 x the load's length over the total CPU time; the aim, 60 s for all 8, is 480x),
`speedup_wall` the same by the wall clock. `rss_mb` is the process's peak resident memory.

Fidelity: 3 fixed-fleet configurations of that service (1 L4, 2 L4s, 1 L4 with fp8 KV) run in kubesim one after
another (the simulated cluster, its engines behind the API server's service proxy; `--fidelity-at-once` deploys and
drives the three side by side: faster, less faithful), each under the same seeded load (`kubesim load`'s generator,
2 requests/s for `--fidelity-seconds`, 180 by default: about 360 requests, so the p95 is not one request's; prompts
sharing half their tokens per session as the demo's load does); the requests the client sent (arrival, prompt and
output tokens) and the prefix-cache hit rate it saw are then replayed by the lab. Errors are (predicted - measured)
/ measured in percent for TTFT p95 (the client's TTFT, which includes the proxy hop) and GPU-hours (replicas x GPUs
x the load's span; for fixed fleets both sides count the same replicas over the same span, so this error is near
zero by construction and says nothing of the engine model). The engine model and kubesim's engines are the same
code, so this measures the lab's fleet, router, load reconstruction and clock against a real-time cluster, not
against hardware: Vidur (under 9 % latency error) and BLIS (about 10 % median error) are measured against real
GPUs, which this bench cannot do.

Search (`--search-only` runs this part alone): the lab's search (`apps.whatif.search`) on one hour of the demo's
recorded-style load (Poisson, 5.4 requests/s, the demo's lengths) and on a production-shaped one (the same mean rate
in bursts: gamma inter-arrivals of shape 0.25, a coefficient of variation of 2, and log-normal prompts with
sigma 1.0 for a long tail; parameters chosen to be burstier than Poisson, not fitted to a published trace), against
the demo's chat service with L4, L40S and H100 SXM nodes at the example prices (`seed_gpu_prices`): wall and CPU
seconds (aim: under 60 s on one core). The demo load's chosen configuration is then deployed in kubesim and driven
for `--chosen-seconds` (600) by the load generator at the same rate and lengths, with the built-in autoscaler
evaluated every 5 s by this process (scrape, evaluate, surge, reconcile, as the beat would); its measured TTFT-budget
and ITL attainment (the client's TTFT, the prefill floor from the capacity planner) are printed beside the search's
prediction and the lab's replay of the requests the client sent (aim: within 5 points).

`--json` ends with one JSON object: {"requests", "scenarios", "wall_s", "cpu_s", "speedup", "speedup_wall",
"rss_mb", "fidelity": [{"config", "ttft_p95_error_pct", "gpu_hours_error_pct"}], "per_scenario": [{"name",
"wall_s", "cpu_s", "speedup", "speedup_wall"}]}.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import random
import resource
import subprocess
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ALTERNATIVES = [
    {"name": "fp8 KV cache", "engine_settings": {"kv_cache_dtype": "fp8"}},
    {"name": "max_num_seqs 128", "engine_settings": {"max_num_seqs": 128}},
    {"name": "2 replicas", "replicas": 2, "min_replicas": 2},
    {"name": "3 replicas", "replicas": 3, "min_replicas": 3},
    {"name": "TP 2 on 2 L4s", "gpus_per_replica": 2, "engine_settings": {"tensor_parallel_size": 2}},
    {"name": "built-in 1-3", "autoscaling": {"autoscaler": "builtin", "targets": {
        "running_requests_per_replica": 16, "waiting_requests_per_replica": 4, "ttft_p95_seconds": 2.0}}},
    {"name": "prefix caching off", "engine_settings": {"enable_prefix_caching": False}},
]
FIDELITY = [("1 L4", {}), ("2 L4s", {"replicas": 2, "min_replicas": 2}),
            ("1 L4, fp8 KV", {"engine_settings": {"kv_cache_dtype": "fp8"}})]


def poisson_load(hours: float, rate: float, seed: int):
    from apps.whatif.lab import Load
    from capacity.traces import TraceRequest

    rng = random.Random(seed)
    out, t = [], rng.expovariate(rate)
    while t < hours * 3600:
        prompt = max(16, min(8000, round(rng.lognormvariate(6.3969, 0.5))))  # median e^6.3969 = 600
        out.append(TraceRequest(t, prompt, rng.randint(50, 200)))
        t += rng.expovariate(rate)
    first = out[0].t
    return Load("bench", [TraceRequest(r.t - first, r.prompt_tokens, r.output_tokens) for r in out])


def demo_service(cluster, replicas: int = 1, **engine):
    from apps.catalog.models import Model, Runtime
    from apps.serving.models import InferenceService, Pool
    from apps.tenancy.models import Tenant
    from apps.tenancy.queues import set_gpu_quota
    from enginevocab.vllm import TAG as VLLM_TAG

    tenant, _ = Tenant.objects.get_or_create(slug="acme", defaults={"name": "Acme"})
    set_gpu_quota(tenant, 64)
    model, _ = Model.objects.get_or_create(
        name="llama-3-1-8b-instruct", defaults=dict(
            source_uri="hf://meta-llama/Llama-3.1-8B-Instruct", parameters_billions=8.03, layers=32, hidden_size=4096,
            attention_heads=32, kv_heads=8, head_dim=128, max_context=131072))
    runtime, _ = Runtime.objects.get_or_create(name="vllm", defaults=dict(engine="vllm", image="vllm/vllm-openai",
                                                                          tag=VLLM_TAG))
    name = f"llama-8b-chat-{InferenceService.objects.count()}"
    service = InferenceService.objects.create(
        tenant=tenant, name=name, cluster=cluster, model=model, runtime=runtime,
        engine_settings={"max_model_len": 16384, "enable_prefix_caching": True, **engine})
    Pool.objects.create(service=service, role="engine", replicas=replicas, min_replicas=1,
                        max_replicas=max(3, replicas), gpu_type="l4-24gb")
    return InferenceService.objects.with_related().get(pk=service.pk)


def speed(args) -> dict:
    from apps.clusters.models import Cluster
    from apps.whatif.lab import _replay, build_scenarios
    from apps.whatif.models import Run  # noqa: F401 (the models are loaded)

    cluster = Cluster.objects.create(name="bench", api_url="http://127.0.0.1:9", insecure_simulator=True,
                                     open_to_all_tenants=True)
    service = demo_service(cluster)
    load = poisson_load(args.hours, args.rate, args.seed)
    scenarios = build_scenarios(service, ALTERNATIVES)
    per, started, cpu_started = [], time.monotonic(), time.thread_time()
    for sc in scenarios:
        t0, c0 = time.monotonic(), time.thread_time()
        result = _replay(sc, load, lambda t, end: None)
        wall, cpu = time.monotonic() - t0, time.thread_time() - c0
        per.append({"name": sc.name, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                    "speedup": round(load.duration_s / cpu, 1), "speedup_wall": round(load.duration_s / wall, 1),
                    "gpu_hours": result["gpu_hours"], "ttft_p95_s": result["ttft_p95_s"],
                    "slo_attainment": result["slo_attainment"]})
        print(f"  {sc.name:<22} {cpu:6.1f} s CPU {load.duration_s / cpu:7.0f}x real time ({wall:6.1f} s wall)  "
              f"GPU-h {result['gpu_hours']:.2f}  TTFT p95 {result['ttft_p95_s']}  SLO {result['slo_attainment']}",
              flush=True)
    wall, cpu = time.monotonic() - started, time.thread_time() - cpu_started
    return {"requests": len(load.requests), "scenarios": len(scenarios), "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2), "speedup": round(len(scenarios) * load.duration_s / cpu, 1),
            "speedup_wall": round(len(scenarios) * load.duration_s / wall, 1), "per_scenario": per}


def fidelity(args) -> list[dict]:
    """The three FIDELITY configurations on one kubesim, each driven by its own load, one after another (or side by
    side with `--fidelity-at-once`: 4 L4 nodes hold their 4 replicas), then each one's requests replayed in the
    lab."""
    from apps.clusters.models import Cluster
    from apps.serving.choices import Phase
    from apps.whatif.fleet import quantile
    from apps.whatif.lab import Load, run_whatif
    from bench.common import free_port
    from capacity.traces import TraceRequest
    from kubesim import loadgen
    from workers.reconcile import reconcile

    port = free_port()
    sim = subprocess.Popen([sys.executable, "-m", "kubesim", "serve", "--port", str(port), "--fast-start",
                            "--pod-network", "loopback", "--nodes", "l4-24gb:4x1"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = []
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_for(url + "/version")
        cluster = Cluster.objects.create(name="kubesim", api_url=url, insecure_simulator=True,
                                         open_to_all_tenants=True)
        def deployed(configs):
            """The services of `configs` (FIDELITY rows), once Ready."""
            services = [demo_service(cluster, changes.get("replicas", 1), **changes.get("engine_settings", {}))
                        for _, changes in configs]
            deadline = time.monotonic() + 180
            while True:
                for service in services:
                    reconcile(service.pk)
                    service.refresh_from_db()
                if all(service.phase == Phase.READY for service in services):
                    return services
                if time.monotonic() > deadline:
                    late = [f"{label} ({s.phase}: {s.conditions})"
                            for (label, _), s in zip(configs, services, strict=True) if s.phase != Phase.READY]
                    raise RuntimeError("not Ready: " + ", ".join(late))
                time.sleep(1)

        def load_for(service):
            host = urllib.parse.urlsplit(service.endpoint)
            name, namespace = host.hostname.split(".")[:2]
            return loadgen.LoadConfig(
                base_url=loadgen.base_url_for(f"{namespace}/{name}:{host.port}", url), rate=2.0,
                duration=args.fidelity_seconds, pattern="poisson",
                prompt_tokens=loadgen.parse_dist("lognormal:600:0.5"),
                output_tokens=loadgen.parse_dist("uniform:50:200"), shared_prefix=0.5, sessions=8,
                seed=args.seed)

        async def drive(services):
            return await asyncio.gather(*(loadgen.run(load_for(service)) for service in services))

        def measured(config, service, results) -> dict:
            label, changes = config
            ok = [r for r in results if r.status == 200 and not r.error and r.ttft is not None]
            measured_p95 = quantile([r.ttft for r in ok], 0.95)
            first = min(r.start for r in ok)
            # Each session is a prefix group (its prompts share their leading words, as loadgen writes them).
            requests = sorted((TraceRequest(r.start - first, r.prompt_tokens, r.completion_tokens or r.max_tokens,
                                            f"session-{r.session}") for r in ok), key=lambda r: r.t)
            hit = sum(r.cached_tokens for r in ok) / max(sum(r.prompt_tokens for r in ok), 1)
            load = Load("kubesim", requests, round(hit, 4))
            predicted = run_whatif(service, load, [])["scenarios"][0]
            replicas = changes.get("replicas", 1)
            measured_gpu_hours = round(replicas * max(load.duration_s, 1.0) / 3600, 2)

            def err(p, m):
                return None if p is None or not m else round((p - m) / m * 100, 1)

            row = {"config": label, "requests": len(ok), "prefix_hit_rate": round(hit, 3),
                   "ttft_p95_measured_s": round(measured_p95, 3), "ttft_p95_predicted_s": predicted["ttft_p95_s"],
                   "ttft_p95_error_pct": err(predicted["ttft_p95_s"], measured_p95),
                   "gpu_hours_measured": measured_gpu_hours, "gpu_hours_predicted": predicted["gpu_hours"],
                   "gpu_hours_error_pct": err(predicted["gpu_hours"], measured_gpu_hours)}
            print(f"  {label:<14} TTFT p95 measured {row['ttft_p95_measured_s']} s, predicted "
                  f"{row['ttft_p95_predicted_s']} s ({row['ttft_p95_error_pct']} %); GPU-h {measured_gpu_hours} vs "
                  f"{predicted['gpu_hours']} ({row['gpu_hours_error_pct']} %)", flush=True)
            return row

        if args.fidelity_at_once:
            services = deployed(FIDELITY)
            out = [measured(*done) for done in zip(FIDELITY, services, asyncio.run(drive(services)), strict=True)]
        else:  # one at a time
            for config in FIDELITY:
                (service,) = deployed([config])
                out.append(measured(config, service, asyncio.run(drive([service]))[0]))
                service.delete()
    finally:
        sim.terminate()
        sim.wait(10)
    return out


def bursty_load(hours: float, rate: float, seed: int, shape: float = 0.25, sigma: float = 1.0):
    """Gamma inter-arrivals of `shape` at mean `rate` (CV 1/sqrt(shape)) and log-normal prompts (median 600)."""
    from apps.whatif.lab import Load
    from capacity.traces import TraceRequest

    rng = random.Random(seed)
    out, t = [], 0.0
    while t < hours * 3600:
        prompt = max(16, min(16000, round(rng.lognormvariate(6.3969, sigma))))
        out.append(TraceRequest(t, prompt, rng.randint(50, 200)))
        t += rng.gammavariate(shape, 1 / (shape * rate))
    return Load("bench:bursty", out)


SEARCH_GPUS = ("l4-24gb", "l40s-48gb", "h100-sxm-80gb")


def search_figures(args) -> dict:
    from django.core.management import call_command

    from apps.clusters.models import Cluster
    from apps.whatif.search import Space, search

    call_command("seed_gpu_prices", stdout=io.StringIO())
    cluster = Cluster.objects.create(name="bench-search", api_url="http://127.0.0.1:9", insecure_simulator=True,
                                     open_to_all_tenants=True)
    service = demo_service(cluster)
    out = {}
    for label, load in (("demo", poisson_load(1.0, args.search_rate, args.seed)),
                        ("bursty", bursty_load(1.0, args.search_rate, args.seed))):
        result = search(service, load, Space(gpu_types=SEARCH_GPUS))
        chosen = result["chosen"]
        out[label] = {"requests": len(load.requests), "wall_s": result["wall_s"], "cpu_s": result["cpu_s"],
                      "replayed": result["replayed"], "pruned": len(result["pruned"]), "stopped": result["stopped"],
                      "current": {k: result["current"][k] for k in ("gpu_hours", "slo_attainment",
                                                                    "itl_slo_attainment")},
                      "front": [{k: r[k] for k in ("name", "gpu_hours", "cost_usd", "slo_attainment",
                                                   "itl_slo_attainment")} for r in result["front"]],
                      "chosen": chosen and {k: chosen[k] for k in ("name", "config", "gpu_hours", "cost_usd",
                                                                   "slo_attainment", "itl_slo_attainment")},
                      "reason": result["reason"]}
        print(f"  {label}: {len(load.requests)} requests, {result['replayed']} replayed, {len(result['pruned'])} "
              f"pruned, {result['wall_s']:.1f} s wall, {result['cpu_s']:.1f} s CPU (aim < 60 s)"
              + (f"; {result['stopped']}" if result["stopped"] else ""), flush=True)
        print(f"    current: {out[label]['current']}", flush=True)
        for r in out[label]["front"]:
            print(f"    {r['name']:<58} GPU-h {r['gpu_hours']:6.2f} ${r['cost_usd']}  TTFT budget "
                  f"{r['slo_attainment']:.1%}  ITL {r['itl_slo_attainment']:.1%}"
                  + ("  <- chosen" if chosen and r["name"] == chosen["name"] else ""), flush=True)
        if not chosen:
            print(f"    {result['reason']}", flush=True)
    return out


def chosen_in_kubesim(args, chosen: dict) -> dict:
    """Deploy the chosen configuration in kubesim, drive it for `--chosen-seconds`, and compare attainment."""
    import threading

    from django.db import connection

    from apps.autoscaling.evaluate import pool_rates
    from apps.clusters.models import Cluster
    from apps.serving.choices import Phase
    from apps.serving.models import InferenceService
    from apps.whatif.lab import Load, run_whatif
    from apps.whatif.scenarios import merged_settings, service_slo
    from bench.common import free_port
    from capacity.traces import TraceRequest
    from kubesim import loadgen
    from workers.reconcile import reconcile
    from workers.tasks.autoscale import evaluate_service, surge_service
    from workers.tasks.telemetry import scrape

    cfg = chosen["config"]
    nodes = f"{cfg['gpu_type']}:{cfg['max_replicas']}x{cfg['gpus_per_replica']}"
    port = free_port()
    sim = subprocess.Popen([sys.executable, "-m", "kubesim", "serve", "--port", str(port), "--fast-start",
                            "--pod-network", "loopback", "--nodes", nodes],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stop = threading.Event()
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_for(url + "/version")
        cluster = Cluster.objects.create(name="kubesim-chosen", api_url=url, insecure_simulator=True,
                                         open_to_all_tenants=True)
        service = demo_service(cluster)
        pool = service.pools.get(role="engine")
        for key in ("gpu_type", "gpus_per_replica", "min_replicas", "max_replicas", "replicas"):
            setattr(pool, key, cfg[key])
        pool.save()
        InferenceService.objects.filter(pk=service.pk).update(
            engine_settings=merged_settings(service.engine_settings, cfg["engine_settings"]),
            autoscaling=cfg["autoscaling"], routing_policy=cfg.get("routing_policy", service.routing_policy))
        service = InferenceService.objects.with_related().get(pk=service.pk)
        deadline = time.monotonic() + 300
        while service.phase != Phase.READY:
            reconcile(service.pk)
            service.refresh_from_db()
            if time.monotonic() > deadline:
                raise RuntimeError(f"chosen configuration not Ready ({service.phase}: {service.conditions})")
            time.sleep(1)

        def control_loop():  # what the beat and the workers do, every 5 s
            try:
                while not stop.wait(5):
                    scrape()
                    evaluate_service(service.pk)
                    surge_service(service.pk)
                    reconcile(service.pk)
            finally:
                connection.close()  # this thread's own, so that the throwaway database can be dropped

        loop = threading.Thread(target=control_loop, daemon=True)
        loop.start()
        host = urllib.parse.urlsplit(service.endpoint)
        name, namespace = host.hostname.split(".")[:2]
        results = asyncio.run(loadgen.run(loadgen.LoadConfig(
            base_url=loadgen.base_url_for(f"{namespace}/{name}:{host.port}", url), rate=args.search_rate,
            duration=args.chosen_seconds, pattern="poisson", prompt_tokens=loadgen.parse_dist("lognormal:600:0.5"),
            output_tokens=loadgen.parse_dist("uniform:50:200"), seed=args.seed)))
        stop.set()
        loop.join(30)
        service = InferenceService.objects.with_related().get(pk=service.pk)
        slo = service_slo(service.autoscaling)
        per_token = 1.0 / pool_rates(service, service.pools.get(role="engine")).prefill_tokens_per_s
        budget = itl = 0
        for r in results:
            if r.status != 200 or r.error or r.ttft is None:
                continue
            budget += r.ttft <= slo.ttft_s + (r.prompt_tokens - r.cached_tokens) * per_token
            n = r.completion_tokens or r.max_tokens
            itl += n < 2 or (r.e2e - r.ttft) / (n - 1) <= slo.itl_s
        first = min(r.start for r in results)
        sent = [TraceRequest(r.start - first, r.prompt_tokens, r.completion_tokens or r.max_tokens) for r in results]
        load = Load("kubesim", sorted(sent, key=lambda r: r.t))
        replay = run_whatif(service, load, [])["scenarios"][0]
        return {"config": chosen["name"], "requests": len(results), "lab_peak_replicas": replay["peak_replicas"],
                "measured": {"slo_attainment": round(budget / len(results), 4),
                             "itl_slo_attainment": round(itl / len(results), 4)},
                "predicted_by_search": {k: chosen[k] for k in ("slo_attainment", "itl_slo_attainment")},
                "lab_replay": {k: replay[k] for k in ("slo_attainment", "itl_slo_attainment")}}
    finally:
        stop.set()
        sim.terminate()
        sim.wait(10)


def _wait_for(url: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def search_part(args) -> dict:
    print("search: 1 h of load, 5.4 requests/s, L4 / L40S / H100 SXM", flush=True)
    figures = search_figures(args)
    chosen = figures["demo"]["chosen"]
    if chosen is None:
        return {"search": figures, "chosen_in_kubesim": None}
    print(f"chosen configuration in kubesim for {args.chosen_seconds:g} s: {chosen['name']}", flush=True)
    check = chosen_in_kubesim(args, chosen)
    print(f"  {check['requests']} requests sent; the lab's replay of them peaks at {check['lab_peak_replicas']} "
          "replicas", flush=True)
    for key in ("slo_attainment", "itl_slo_attainment"):
        measured, predicted = check["measured"][key], check["predicted_by_search"][key]
        print(f"  {key}: measured {measured:.1%}, predicted by the search {predicted:.1%} "
              f"({(measured - predicted) * 100:+.1f} points; aim within 5), the lab's replay of the same requests "
              f"{check['lab_replay'][key]:.1%}", flush=True)
    return {"search": figures, "chosen_in_kubesim": check}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--rate", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fidelity-seconds", type=float, default=180.0)
    parser.add_argument("--fidelity-at-once", action="store_true",
                        help="drive the 3 kubesim configurations at the same time (a third of the wall time); their "
                        "engines then share kubesim's event loop and the client, so the figures are taken one after "
                        "another")
    parser.add_argument("--search-rate", type=float, default=5.4)
    parser.add_argument("--chosen-seconds", type=float, default=600.0)
    parser.add_argument("--search-only", action="store_true")
    parser.add_argument("--no-search", action="store_true", help="the lab's speed and fidelity only: no search and "
                        "no 10-minute kubesim check of its answer")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from bench.common import setup_django, throwaway_database

    setup_django("bench/whatif.py")

    if args.search_only:
        with throwaway_database():
            result = search_part(args)
        if args.json:
            print(json.dumps(result))
        return 0
    with throwaway_database():
        searched = {} if args.no_search else search_part(args)
        print(f"speed: {args.hours:g} h at {args.rate:g} requests/s, 8 scenarios", flush=True)
        figures = speed(args)
        print(f"all {figures['scenarios']}: {figures['cpu_s']} s CPU ({figures['wall_s']} s wall) for "
              f"{figures['requests']} requests each, {figures['speedup']}x real time together on one core "
              f"({figures['speedup_wall']}x by the wall clock) (aim: 480x)", flush=True)
        rss_mb = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        print(f"peak RSS {rss_mb} MB (aim: under 500)", flush=True)
        print(f"fidelity against kubesim, {args.fidelity_seconds:g} s at 2 requests/s per config", flush=True)
        rows = fidelity(args)
    result = {"requests": figures["requests"], "scenarios": figures["scenarios"], "wall_s": figures["wall_s"],
              "cpu_s": figures["cpu_s"], "speedup": figures["speedup"], "speedup_wall": figures["speedup_wall"],
              "rss_mb": rss_mb,
              "fidelity": [{k: r[k] for k in ("config", "ttft_p95_error_pct", "gpu_hours_error_pct")} for r in rows],
              "per_scenario": figures["per_scenario"], "fidelity_detail": rows, **searched}
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
