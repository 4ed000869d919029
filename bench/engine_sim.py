"""How many simulated engines and requests per second one kubesim process sustains on one core.

    .venv/bin/python bench/engine_sim.py [--quick]

Part 1 drives N simulated vLLM engines (Llama-3.1-8B on H100) in one event loop at an aggregate Poisson
rate, in real time, with the metrics observers attached. Two errors are measured: the mean relative error
of each request's completion as the event loop delivered it against its modelled completion time, and
the share of the engines' timeline lost because the loop fell behind (re-anchored steps). "Within 5%"
means both stay under 5%. Requests enter the engine cores directly (no HTTP): this measures the
simulation itself.
Part 2 runs a shared-prefix workload over 4 engines routed prefix-aware and round robin and prints TTFT p95
of each and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from enginevocab.vllm import IMAGE_REF as VLLM_IMAGE_REF
from kubesim.engines import config, flags
from kubesim.engines.core import Clock, EngineCore
from kubesim.engines.harness import pod_context
from kubesim.engines.metrics import VllmMetrics
from kubesim.engines.request import Request
from kubesim.engines.routing import RequestInfo, RoutingState
from kubesim.engines.tokenizer import tokenize
from kubesim.workload import Endpoint

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


async def poisson_arrivals(rate: float, duration: float, rng: random.Random):
    """Yield 0, 1, 2, ... at Poisson arrival times (real time) for `duration` seconds."""
    t0, t, i = time.monotonic(), 0.0, 0
    while True:
        t += rng.expovariate(rate)
        if t >= duration:
            return
        delay = t0 + t - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        yield i
        i += 1


def make_engine(scale: float, seed: int) -> EngineCore:
    ctx = pod_context(
        VLLM_IMAGE_REF,
        [LLAMA, "--max-model-len", "8192"],
        annotations={"kubesim.io/time-scale": str(scale)},
        seed=seed,
    )
    ns, _ = flags.parse_vllm(flags.command_line(ctx.container, ctx.env))
    spec = config.vllm_spec(ns, ctx)
    metrics = VllmMetrics(LLAMA, "0", spec.core.max_model_len, spec.cache_info, False, 1, False, True)
    core = EngineCore(spec.core, Clock(scale), metrics)
    core.start()
    return core


async def capacity(
    n_engines: int, rate: float, duration: float, prompt: int, output: int, seed: int = 0, freeze_gc: bool = True
) -> dict:
    engines = [make_engine(1.0, seed + i) for i in range(n_engines)]
    if freeze_gc:
        # Engines, registries and parsers live for the whole run: keep them out of full collections,
        # as a long-running kubesim would after start-up.
        gc.collect()
        gc.freeze()
    rng = random.Random(seed)
    base = [rng.randrange(1 << 30) for _ in range(prompt)]
    errors: list[float] = []
    all_done = asyncio.Event()
    finished = 0

    def on_done(fut: asyncio.Future, clock: Clock) -> None:
        # Only the error is kept, so finished requests are freed as in a server.
        nonlocal finished
        req = fut.result()
        errors.append(abs(clock.now() - req.last_token) / (req.last_token - req.arrival))
        finished += 1
        if finished == sent and sending_over:
            all_done.set()

    sending_over = False
    cpu0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime + resource.getrusage(resource.RUSAGE_SELF).ru_stime
    t0 = time.monotonic()
    sent = 0
    async for _ in poisson_arrivals(rate, duration, rng):
        core = engines[sent % n_engines]
        tokens = [sent, *base[1:]]  # a distinct first token: no prefix-cache hits
        req = core.add(Request(f"b{sent}", tokens, output, output))
        req.done.add_done_callback(lambda f, c=core.clock: on_done(f, c))
        sent += 1
    send_lag = time.monotonic() - t0 - duration
    sending_over = True
    if finished < sent:
        await all_done.wait()
    wall = time.monotonic() - t0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    cpu = ru.ru_utime + ru.ru_stime - cpu0
    model = sum(c.busy_model_s for c in engines)
    lost = sum(c.lost_s for c in engines)
    steps = sum(c.steps for c in engines)
    for c in engines:
        await c.stop()
    gc.unfreeze()
    return {
        "engines": n_engines,
        "rate": rate,
        "sent": sent,
        "req_per_s": sent / duration,
        "wall": wall,
        "cpu": cpu,
        "steps": steps,
        "lost": lost / model if model else 0.0,
        "error": sum(errors) / len(errors) if errors else 0.0,
        "send_lag": send_lag,
    }


def p95(values: list[float]) -> float:
    v = sorted(values)
    return v[int(0.95 * (len(v) - 1))]


def tenant_prefixes(tenants: int = 12, words: int = 3000) -> list[str]:
    """The multi-tenant shared-prefix workload's prefixes: one `words`-word system prompt per tenant."""
    return [" ".join(f"t{k}w{i % 97}" for i in range(words)) for k in range(tenants)]


def tenant_request(rng: random.Random, prefixes: list[str]) -> str:
    """One request of the workload: a tenant drawn uniformly, its prefix, a unique question of 200 more words."""
    k = rng.randrange(len(prefixes))
    return prefixes[k] + f" question {rng.randrange(10**6)} " + " ".join(f"q{j}" for j in range(200))


async def prefix_vs_round_robin(policy: str, seed: int = 1, scale: float = 4.0) -> float:
    """TTFT p95 (simulated seconds) of a multi-tenant shared-prefix workload over 4 engines."""
    engines = [make_engine(scale, seed + i) for i in range(4)]
    from kubesim.engines.server import LOCAL_ENGINES

    class _Local:  # lets the routing state read queue lengths and KV usage of these cores
        def __init__(self, core):
            self.core = core

        def load(self):
            return len(self.core.running) + len(self.core.waiting)

        def kv_usage(self):
            return self.core.kv_usage()

    eps = []
    for i, core in enumerate(engines):
        url = f"bench://engine-{i}"
        LOCAL_ENGINES[url] = _Local(core)
        eps.append(Endpoint(f"engine-{i}", url))
    state = RoutingState(policy, seed=seed)
    rng = random.Random(seed)
    tenants = tenant_prefixes()
    rate, duration = 12.0, 30.0  # simulated seconds
    clock = engines[0].clock
    reqs = []
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= duration:
            break
        await clock.sleep_until(t)
        text = tenant_request(rng, tenants)
        ep = state.pick(RequestInfo(prompt=text), eps)
        core = engines[int(ep.pod_name.split("-")[1])]
        reqs.append(core.add(Request(f"r{len(reqs)}", tokenize(text), 64, 64)))
    await asyncio.gather(*(r.done for r in reqs))
    for url in [e.base_url for e in eps]:
        LOCAL_ENGINES.pop(url, None)
    for c in engines:
        await c.stop()
    return p95([r.first_token - r.arrival for r in reqs])


async def http_client(urls: list[str], rate: float, duration: float, seed: int = 0) -> dict:
    """The client side of part 3 (run in its own process): Poisson completions spread over the engines."""
    import aiohttp

    rng = random.Random(seed)
    latencies: list[float] = []
    errors = 0

    async def one(session, url, i):
        nonlocal errors
        body = {"prompt": f"r{i} " + "ab " * 255, "max_tokens": 64, "ignore_eos": True}
        t = time.monotonic()
        try:
            async with session.post(url + "/v1/completions", json=body) as r:
                await r.read()
                if r.status != 200:
                    errors += 1
                    return
        except aiohttp.ClientError:
            errors += 1
            return
        latencies.append(time.monotonic() - t)

    tasks = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        t0 = time.monotonic()
        async for i in poisson_arrivals(rate, duration, rng):
            tasks.append(asyncio.create_task(one(session, urls[i % len(urls)], i)))
        send_lag = time.monotonic() - t0 - duration
        await asyncio.gather(*tasks)
    return {"sent": len(tasks), "errors": errors, "mean": sum(latencies) / max(len(latencies), 1), "send_lag": send_lag}


async def http_capacity(n_engines: int, rate: float, duration: float) -> dict:
    """Part 3: engines behind HTTP in this process, the client in a subprocess (its own core if free)."""
    import json

    from kubesim.engines.harness import start

    workloads = [
        await start(pod_context(VLLM_IMAGE_REF, [LLAMA, "--max-model-len", "8192"], seed=i))
        for i in range(n_engines)
    ]
    gc.collect()
    gc.freeze()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        os.path.abspath(__file__),
        "--client",
        str(rate),
        str(duration),
        *[w.base_url for w in workloads],
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    wall = time.monotonic() - t0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    cpu = ru.ru_utime + ru.ru_stime - ru0.ru_utime - ru0.ru_stime
    cores = [w.core for w in workloads]
    model = sum(c.busy_model_s for c in cores)
    lost = sum(c.lost_s for c in cores) / model if model else 0.0
    for w in workloads:
        await w.stop()
    gc.unfreeze()
    client = json.loads(out.decode().strip().splitlines()[-1])
    return {**client, "cpu": cpu, "wall": wall, "lost": lost}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        import json

        rate, duration, urls = float(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
        os.sched_setaffinity(0, range(os.cpu_count() or 1))  # not on the server's core when it was pinned
        print(json.dumps(asyncio.run(http_client(urls, rate, duration))))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    parser.add_argument("--duration", type=float, default=None)
    parser.add_argument(
        "--http-configs",
        default="20x200,50x500,100x1000",
        help="part 3, through HTTP: comma-separated ENGINESxREQ_PER_S ('' to skip)",
    )
    parser.add_argument(
        "--configs", default="10x200,50x1000,100x2000,150x3000,200x4000", help="comma-separated ENGINESxREQ_PER_S"
    )
    args = parser.parse_args()
    duration = args.duration or (5.0 if args.quick else 10.0)
    print("part 1: engines x aggregate rate, Llama-3.1-8B on H100, prompt 256 / output 64 tokens, real time")
    print(
        f"{'engines':>7} {'req/s':>7} {'sent':>6} {'cpu%':>5} {'steps/s':>7} {'latency err':>11} {'lost':>6} "
        f"{'CPU us/req':>10}  verdict"
    )
    best = None
    configs = [tuple(int(x) for x in c.split("x")) for c in args.configs.split(",")]
    for n, rate in configs:
        r = asyncio.run(capacity(n, rate, duration, 256, 64))
        ok = r["error"] <= 0.05 and r["lost"] <= 0.05 and r["send_lag"] < 0.5
        if ok:
            best = r
        print(
            f"{n:>7} {r['req_per_s']:>7.0f} {r['sent']:>6} {100 * r['cpu'] / r['wall']:>5.0f} "
            f"{r['steps'] / r['wall']:>7.0f} {r['error'] * 100:>10.2f}% {r['lost'] * 100:>5.1f}% "
            f"{1e6 * r['cpu'] / r['sent']:>10.0f}  {'within 5%' if ok else 'falls behind'}"
        )
    if best:
        print(f"sustained: {best['engines']} engines at {best['req_per_s']:.0f} req/s within 5% of the model")
    print("(cpu% is this process's share of its core: below ~100% while falling behind means other processes")
    print(" took the core; CPU us/req is the simulation cost per request including its steps and metrics)")
    print("part 2: 12 tenants x 3000-token shared prefix, 12 req/s over 4 engines (simulated 30 s)")
    pa = asyncio.run(prefix_vs_round_robin("prefixaware"))
    rr = asyncio.run(prefix_vs_round_robin("roundrobin"))
    print(f"TTFT p95 prefix-aware {pa * 1000:.0f} ms, round robin {rr * 1000:.0f} ms, ratio {pa / rr:.2f}")
    if args.http_configs:
        print("part 3: the same engines behind HTTP (aiohttp, non-streaming), client in another process")
        print(f"{'engines':>7} {'req/s':>7} {'sent':>6} {'errors':>6} {'cpu%':>5} {'lost':>6} {'mean e2e':>9}  verdict")
        for c in args.http_configs.split(","):
            n, rate = (int(x) for x in c.split("x"))
            r = asyncio.run(http_capacity(n, rate, duration))
            ok = r["errors"] == 0 and r["lost"] <= 0.05 and r["send_lag"] < 0.5
            print(
                f"{n:>7} {r['sent'] / duration:>7.0f} {r['sent']:>6} {r['errors']:>6} "
                f"{100 * r['cpu'] / r['wall']:>5.0f} {r['lost'] * 100:>5.1f}% {r['mean'] * 1000:>7.0f}ms  "
                f"{'within 5%' if ok else 'falls behind'}"
            )


if __name__ == "__main__":
    main()
