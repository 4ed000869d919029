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

Fidelity: 3 fixed-fleet configurations of that service (1 L4, 2 L4s, 1 L4 with fp8 KV) run in kubesim (the
simulated cluster, its engines behind the API server's service proxy) under the same seeded load (`kubesim load`'s
generator, 2 requests/s for `--fidelity-seconds`, 180 by default: about 360 requests, so the p95 is not one
request's; prompts sharing half their tokens per session as the demo's load does); the requests the client sent
(arrival, prompt and output tokens) and the prefix-cache hit rate it saw are then replayed by the lab. Errors are
(predicted - measured) / measured in percent for TTFT p95 (the client's TTFT, which includes the proxy hop) and
GPU-hours (replicas x GPUs x the load's span; for fixed fleets both sides count the same replicas over the same
span, so this error is near zero by construction and says nothing of the engine model). The engine model and
kubesim's engines are the same code, so this measures the lab's fleet, router, load reconstruction and clock
against a real-time cluster, not against hardware: Vidur (under 9 % latency error) and BLIS (about 10 % median
error) are measured against real GPUs, which this bench cannot do.

`--json` ends with one JSON object: {"requests", "scenarios", "wall_s", "cpu_s", "speedup", "speedup_wall",
"rss_mb", "fidelity": [{"config", "ttft_p95_error_pct", "gpu_hours_error_pct"}], "per_scenario": [{"name",
"wall_s", "cpu_s", "speedup", "speedup_wall"}]}.
"""

from __future__ import annotations

import argparse
import asyncio
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
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/version", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        cluster = Cluster.objects.create(name="kubesim", api_url=url, insecure_simulator=True,
                                         open_to_all_tenants=True)
        for label, changes in FIDELITY:
            service = demo_service(cluster, changes.get("replicas", 1), **changes.get("engine_settings", {}))
            deadline = time.monotonic() + 180
            while True:
                reconcile(service.pk)
                service.refresh_from_db()
                if service.phase == Phase.READY:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{label}: not Ready ({service.phase}: {service.conditions})")
                time.sleep(1)
            host = urllib.parse.urlsplit(service.endpoint)
            name, namespace = host.hostname.split(".")[:2]
            cfg = loadgen.LoadConfig(
                base_url=loadgen.base_url_for(f"{namespace}/{name}:{host.port}", url), rate=2.0,
                duration=args.fidelity_seconds, pattern="poisson",
                prompt_tokens=loadgen.parse_dist("lognormal:600:0.5"),
                output_tokens=loadgen.parse_dist("uniform:50:200"), shared_prefix=0.5, sessions=8,
                seed=args.seed)
            results = asyncio.run(loadgen.run(cfg))
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
            out.append(row)
            service.delete()
    finally:
        sim.terminate()
        sim.wait(10)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--rate", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fidelity-seconds", type=float, default=180.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    import django

    django.setup()
    from bench.common import throwaway_database

    with throwaway_database():
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
              "per_scenario": figures["per_scenario"], "fidelity_detail": rows}
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
