"""Benchmark kubesim's API server: server-side-apply throughput and watch delivery latency.

Starts the bare API server (no simulated cluster: no controllers writing status) in a subprocess so it
gets its own core, stores 2,000 Deployments, then measures
  1. SSA throughput (objects/s) re-applying changed Deployments with 2,000 in the store, no watchers;
  2. watch delivery latency p50/p99 (apply request sent -> event line read by a watcher) with 20
     concurrent watchers on the namespace while applies run at --rate (default 500/s, the target rate).

Usage: .venv/bin/python bench/kubesim_api.py [--objects 2000] [--applies 4000] [--watchers 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import re
import signal
import statistics
import subprocess
import sys
import time

import aiohttp

NS = "bench"
SENT = re.compile(rb'"bench/sent":"([0-9.]+)"')


def deployment(i: int, round_: int, sent: float | None = None) -> dict:
    name = f"d{i:05d}"
    labels = {"app": name}
    annotations = {"bench/round": str(round_)}
    if sent is not None:
        annotations["bench/sent"] = f"{sent:.6f}"
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS, "labels": labels, "annotations": annotations},
        "spec": {"replicas": 1 + round_ % 3, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": {"containers": [
                     {"name": "engine", "image": "vllm/vllm-openai:v0.8.5",
                      "args": ["--model", "Qwen/Qwen2.5-7B-Instruct"],
                      "env": [{"name": "ROUND", "value": str(round_)}],
                      "ports": [{"containerPort": 8000}],
                      "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
    }


async def apply_all(session: aiohttp.ClientSession, base: str, indices, round_: int, concurrency: int,
                    stamp: bool, rate: float | None = None) -> float:
    """SSA every index once with `concurrency` requests in flight (at most `rate`/s); returns seconds."""
    queue: asyncio.Queue = asyncio.Queue()
    for n, i in enumerate(indices):
        queue.put_nowait((n, i))
    started = time.perf_counter()

    async def worker():
        while not queue.empty():
            n, i = queue.get_nowait()
            if rate:
                delay = started + n / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            body = json.dumps(deployment(i, round_, time.time() if stamp else None))
            url = f"{base}/apis/apps/v1/namespaces/{NS}/deployments/d{i:05d}?fieldManager=bench&force=true"
            async with session.patch(url, data=body,
                                     headers={"Content-Type": "application/apply-patch+yaml"}) as resp:
                await resp.read()
                if resp.status not in (200, 201):
                    raise RuntimeError(f"apply failed: {resp.status} {await resp.text()}")

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


async def watcher(session: aiohttp.ClientSession, url: str, latencies: list[float], ready: asyncio.Event) -> None:
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=None)) as resp:
        ready.set()
        async for line in resp.content:
            now = time.time()
            m = SENT.search(line)
            if m:
                latencies.append(now - float(m.group(1)))


async def _watch_all(base: str, rv: str, watchers: int, expected: int, conn) -> None:
    url = f"{base}/apis/apps/v1/namespaces/{NS}/deployments?watch=true&resourceVersion={rv}"
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=watchers + 1)
    async with aiohttp.ClientSession(connector=connector) as session:
        readies = [asyncio.Event() for _ in range(watchers)]
        tasks = [asyncio.ensure_future(watcher(session, url, latencies, r)) for r in readies]
        await asyncio.gather(*(r.wait() for r in readies))
        conn.send("ready")
        deadline = None
        while len(latencies) < expected:
            if deadline is None and conn.poll():
                conn.recv()  # the writer is done: allow 30 s more for stragglers
                deadline = time.monotonic() + 30
            if deadline is not None and time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    conn.send(latencies)


def watch_process(base: str, rv: str, watchers: int, expected: int, conn) -> None:
    """The watchers run in their own process so reading 10k lines/s does not slow the writer."""
    asyncio.run(_watch_all(base, rv, watchers, expected, conn))


async def run(args) -> None:
    from bench.common import free_port

    port = free_port()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    server = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", str(port)], cwd=root,
                              stdout=subprocess.PIPE, text=True)
    server.stdout.readline()
    base = f"http://127.0.0.1:{port}"
    connector = aiohttp.TCPConnector(limit=args.concurrency + args.watchers + 4)
    try:
        async with aiohttp.ClientSession(connector=connector) as session:
            async with session.post(f"{base}/api/v1/namespaces", json={"metadata": {"name": NS}}) as resp:
                assert resp.status == 201, await resp.text()
            t = await apply_all(session, base, range(args.objects), 0, args.concurrency, stamp=False)
            print(f"created {args.objects} Deployments by SSA in {t:.2f}s ({args.objects / t:.0f} objects/s)")

            indices = [i % args.objects for i in range(args.applies)]
            t = await apply_all(session, base, indices, 1, args.concurrency, stamp=False)
            print(f"SSA throughput, {args.objects} Deployments stored, no watchers: "
                  f"{args.applies / t:.0f} objects/s ({args.applies} applies in {t:.2f}s)")

            async with session.get(f"{base}/apis/apps/v1/namespaces/{NS}/deployments?limit=1") as resp:
                rv = (await resp.json())["metadata"]["resourceVersion"]
            expected = args.applies * args.watchers
            parent, child = multiprocessing.get_context("spawn").Pipe()
            proc = multiprocessing.get_context("spawn").Process(
                target=watch_process, args=(base, rv, args.watchers, expected, child))
            proc.start()
            loop = asyncio.get_running_loop()
            assert await loop.run_in_executor(None, parent.recv) == "ready"
            t = await apply_all(session, base, indices, 2, args.concurrency, stamp=True, rate=args.rate)
            parent.send("done")
            latencies = await loop.run_in_executor(None, parent.recv)
            proc.join(10)
            pace = f"paced at {args.rate:.0f}/s" if args.rate else "unpaced"
            print(f"SSA with {args.watchers} watchers, {pace}: achieved {args.applies / t:.0f} objects/s")
            lat = sorted(latencies)
            p50 = statistics.median(lat) * 1000
            p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
            print(f"watch delivery latency over {len(lat)}/{expected} events: p50 {p50:.1f} ms, p99 {p99:.1f} ms")
    finally:
        server.terminate()
        server.wait(10)


async def serve(port: int) -> None:
    """The API server alone, as the benchmark's subprocess."""
    from kubesim.apiserver.server import Server

    server = Server(port=port, tune_gc=True)  # as `python -m kubesim serve` runs it
    await server.start()
    print(f"listening on {server.url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--objects", type=int, default=2000)
    parser.add_argument("--applies", type=int, default=4000)
    parser.add_argument("--watchers", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rate", type=float, default=500.0,
                        help="write rate while watchers measure latency (0: as fast as possible)")
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if args.serve is not None:
        asyncio.run(serve(args.serve))
    else:
        asyncio.run(run(args))


if __name__ == "__main__":
    main()
