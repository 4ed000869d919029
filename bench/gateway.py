"""The gateway's cost and its limits' accuracy, from one run.

    .venv/bin/python bench/gateway.py [--rate 500] [--seconds 10] [--no-litellm] [--json]

1. An engine that answers at once (a small aiohttp upstream, streaming three tokens and its usage), so what is
   measured is the path, not the engine.
2. The gateway (`python -m gateway`, pinned to one core with taskset where there is one to spare) with a routing
   snapshot of 10,000 keys and 1,000 services, limits shared through Redis; the load uses 1,000 distinct keys.
3. The same streamed requests sent open-loop at `--rate` for `--seconds`: straight to the engine (`direct`), through
   the gateway (`gateway`) and, unless `--no-litellm`, through LiteLLM's proxy (`litellm`: installed into a
   throwaway venv under `.data/bench-litellm` on first use, configured with one master key and an RPM limit on its
   one model). Each gives the request latency to the end of the stream, p50 and p99, and the requests/s answered.
   The added latencies are gateway minus direct, percentile by percentile.
4. Redis round trips per request the gateway let through, from its own `gateway_redis_round_trips` counter.
5. Limits under many replicas: 10 gateway processes sharing Redis, 200 parallel clients spread over them, 600
   requests against a key allowed 100 per minute: how many got through.
6. The gateway's RSS with that snapshot after the load.

`--json` prints one JSON object as the last line: rate, direct / gateway / litellm ({p50_ms, p99_ms, rps}; litellm
null with litellm_error when it could not run), added_p50_ms, added_p99_ms, redis_round_trips_per_request,
limits {limit_rpm, replicas, clients, sent, allowed}, gateway_rss_mb. Needs Redis (`GATEWAY_BENCH_REDIS`, default
redis://127.0.0.1:6379/12). Only loopback addresses are used.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.common import free_port  # noqa: E402

REDIS = os.environ.get("GATEWAY_BENCH_REDIS", "redis://127.0.0.1:6379/12")
# The newest LiteLLM whose [proxy] extra resolves from PyPI here (1.110.2 asks for an unpublished litellm-proxy).
LITELLM_VERSION = "1.108.7"
KEYS, SERVICES, ACTIVE_KEYS = 10_000, 1_000, 1_000
USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}


# --- the instant engine ------------------------------------------------------------------------------------------


def serve_engine(port: int) -> None:
    from aiohttp import web

    def event(payload: dict) -> bytes:
        return b"data: " + json.dumps(payload).encode() + b"\n\n"

    async def complete(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        kind = "chat.completion.chunk" if request.path.endswith("chat/completions") else "text_completion"
        if not body.get("stream"):
            return web.json_response({"id": "b", "object": kind, "model": body.get("model"), "usage": USAGE,
                                      "choices": [{"index": 0, "text": "a b c", "finish_reason": "length",
                                                   "message": {"role": "assistant", "content": "a b c"}}]})
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for word in ("a", " b", " c"):
            await response.write(event({"id": "b", "object": kind, "model": body.get("model"),
                                        "choices": [{"index": 0, "text": word, "delta": {"content": word}}]}))
        if (body.get("stream_options") or {}).get("include_usage"):
            await response.write(event({"id": "b", "object": kind, "choices": [], "usage": USAGE}))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "llama-8b", "object": "model"}]})

    app = web.Application()
    app.router.add_post("/v1/completions", complete)
    app.router.add_post("/v1/chat/completions", complete)
    app.router.add_get("/v1/models", models)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# --- processes -----------------------------------------------------------------------------------------------------


def wait_http(url: str, timeout: float = 60.0) -> None:
    from urllib.error import URLError
    from urllib.request import urlopen

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urlopen(url, timeout=2):
                return
        except URLError as exc:
            if getattr(exc, "code", None):  # an HTTP error is an answer
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"{url} did not answer in {timeout:.0f} s") from None
            time.sleep(0.1)
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"{url} did not answer in {timeout:.0f} s") from None
            time.sleep(0.1)


def pinned(command: list[str], core: int | None) -> list[str]:
    if core is not None and shutil.which("taskset"):
        return ["taskset", "-c", str(core), *command]
    return command


def snapshot(path: Path, engine: str, limit_rpm: int | None) -> list[str]:
    """A routing snapshot of KEYS keys and SERVICES services, all keys of tenant 1, service 1 at the engine;
    returns the keys' plaintexts."""
    keys = [f"sk-bench-{i:05d}-{uuid.uuid4().hex}" for i in range(KEYS)]
    services = [{"id": i, "tenant_id": 1 + (i > 1), "name": f"svc-{i}", "served_model": "llama-8b",
                 "adapters": [], "routing_policy": "round_robin", "routed": False, "wakes": False,
                 "ready_engines": 1 if i == 1 else 0,
                 "endpoints": [{"pod": "engine-0", "address": engine}] if i == 1 else []}
                for i in range(1, SERVICES + 1)]
    limits = {"rpm": limit_rpm, "tpm": None, "concurrency": None, "monthly_token_budget": None}
    data = {"format": 1, "built_at": "bench", "tenants": {}, "services": services,
            "keys": {hashlib.sha256(k.encode()).hexdigest(): {"id": i + 1, "tenant_id": 1, "services": None,
                                                               "expires_at": time.time() + 86400, **limits}
                     for i, k in enumerate(keys)}}
    path.write_text(json.dumps(data))
    return keys


def start_gateway(snap: Path, prefix: str, core: int | None = None, *extra: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(pinned([sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", str(port),
                                    "--snapshot", str(snap), "--redis-url", REDIS, "--redis-prefix", prefix, *extra],
                                   core), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    wait_http(f"{base}/readyz")
    return proc, base


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


# --- load ------------------------------------------------------------------------------------------------------------


async def _load(url: str, keys: list[str], model: str, rate: float, seconds: float) -> dict:
    """Open-loop streamed requests at `rate`/s: latency to the stream's end, p50/p99, and answers per second."""
    import aiohttp

    latencies: list[float] = []
    failures = 0
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def one(i: int) -> None:
            nonlocal failures
            start = time.perf_counter()
            try:
                async with session.post(f"{url}/v1/completions", json={
                        "model": model, "prompt": "hi", "max_tokens": 3, "stream": True},
                        headers={"authorization": f"Bearer {keys[i % len(keys)]}"}) as response:
                    await response.read()
                    if response.status != 200:
                        failures += 1
                        return
            except aiohttp.ClientError:
                failures += 1
                return
            latencies.append(time.perf_counter() - start)

        tasks, began = [], time.perf_counter()
        total = int(rate * seconds)
        for i in range(total):
            delay = began + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(one(i)))
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - began
    latencies.sort()

    def q(p: float) -> float | None:
        return round(latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000, 3) if latencies else None

    return {"p50_ms": q(0.50), "p99_ms": q(0.99), "rps": round(len(latencies) / elapsed, 1), "answered": len(latencies),
            "failed": failures}


def warm(url, keys, model) -> None:
    """A second of light load first: connections, caches and Redis scripts warm, nothing counted."""
    asyncio.run(_load(url, keys[:50], model, 50, 1.0))


def load(url, keys, model, rate, seconds) -> dict:
    return asyncio.run(_load(url, keys, model, rate, seconds))


def round_trips(base: str) -> float:
    from urllib.request import urlopen

    with urlopen(f"{base}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("gateway_redis_round_trips "):
                return float(line.split()[1])
    return 0.0


# --- LiteLLM, the peer -------------------------------------------------------------------------------------------


def litellm(engine: str, rate: float, seconds: float, core: int | None) -> tuple[dict | None, str | None]:
    venv = ROOT / ".data" / "bench-litellm"
    python = venv / "bin" / "python"
    try:
        if not (venv / ".installed").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"litellm[proxy]=={LITELLM_VERSION}"],
                           check=True, timeout=900)
            (venv / ".installed").touch()
    except (subprocess.SubprocessError, OSError) as exc:
        return None, f"could not install litellm[proxy]=={LITELLM_VERSION}: {exc}"
    master = f"sk-{uuid.uuid4().hex}"
    config = venv / "config.yaml"
    config.write_text(json.dumps({  # YAML is a superset of JSON
        "model_list": [{"model_name": "llama-8b", "litellm_params": {
            "model": "openai/llama-8b", "api_base": f"http://{engine}/v1", "api_key": "none",
            "rpm": 10_000_000}}],
        "general_settings": {"master_key": master},
        "litellm_settings": {"drop_params": True, "telemetry": False}}))
    port = free_port()
    env = {**os.environ, "LITELLM_LOG": "ERROR", "DISABLE_SCHEMA_UPDATE": "true"}
    proc = subprocess.Popen(pinned([str(venv / "bin" / "litellm"), "--config", str(config), "--host", "127.0.0.1",
                                    "--port", str(port), "--num_workers", "1"], core),
                            cwd=venv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/health/liveliness", timeout=180)
        warm(f"http://127.0.0.1:{port}", [master], "llama-8b")
        return load(f"http://127.0.0.1:{port}", [master], "llama-8b", rate, seconds), None
    except SystemExit as exc:
        return None, f"litellm's proxy did not start: {exc}"
    finally:
        stop(proc)


# --- limits across replicas ----------------------------------------------------------------------------------------


async def _burst(bases: list[str], key: str, clients: int, sent: int) -> int:
    import aiohttp

    allowed = 0
    queue = list(range(sent))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        async def client(c: int) -> None:
            nonlocal allowed
            while queue:
                queue.pop()
                async with session.post(f"{bases[c % len(bases)]}/v1/completions", json={
                        "model": "svc-1", "prompt": "hi", "max_tokens": 1},
                        headers={"authorization": f"Bearer {key}"}) as response:
                    await response.read()
                    allowed += response.status == 200

        await asyncio.gather(*(client(c) for c in range(clients)))
    return allowed


def limits_accuracy(engine: str, workdir: Path, replicas: int = 10, clients: int = 200, sent: int = 600,
                    limit_rpm: int = 100) -> dict:
    snap = workdir / "limited.json"
    keys = snapshot(snap, engine, limit_rpm)
    prefix = f"bench:{uuid.uuid4().hex}:"
    procs = [start_gateway(snap, prefix) for _ in range(replicas)]
    try:
        allowed = asyncio.run(_burst([base for _, base in procs], keys[0], clients, sent))
    finally:
        for proc, _ in procs:
            stop(proc)
    return {"limit_rpm": limit_rpm, "replicas": replicas, "clients": clients, "sent": sent, "allowed": allowed}


# --- the run ---------------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=500.0, help="requests per second offered (default 500)")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of load per target (default 10)")
    parser.add_argument("--no-litellm", action="store_true", help="skip the LiteLLM side by side")
    parser.add_argument("--json", action="store_true", help="one JSON object as the last line")
    parser.add_argument("--serve-engine", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_engine:
        serve_engine(args.serve_engine)
        return 0
    if args.rate <= 0 or args.seconds <= 0:
        parser.error("--rate and --seconds must be greater than 0")
    cores = os.cpu_count() or 1
    server_core = cores - 1 if cores > 1 else None  # the server on the last core, the load elsewhere
    port = free_port()
    engine_proc = subprocess.Popen(pinned([sys.executable, __file__, "--serve-engine", str(port)], None), cwd=ROOT)
    engine = f"127.0.0.1:{port}"
    workdir = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    try:
        wait_http(f"http://{engine}/v1/models")
        keys = snapshot(workdir / "snapshot.json", engine, limit_rpm=10_000_000)
        warm(f"http://{engine}", keys, "llama-8b")
        direct = load(f"http://{engine}", keys, "llama-8b", args.rate, args.seconds)
        gateway, base = start_gateway(workdir / "snapshot.json", f"bench:{uuid.uuid4().hex}:", server_core)
        try:
            warm(base, keys, "svc-1")
            trips_before = round_trips(base)
            through = load(base, keys[:ACTIVE_KEYS], "svc-1", args.rate, args.seconds)
            trips = (round_trips(base) - trips_before) / max(through["answered"], 1)
            rss = rss_mb(gateway.pid)
        finally:
            stop(gateway)
        peer, peer_error = (None, "skipped (--no-litellm)") if args.no_litellm else \
            litellm(engine, args.rate, args.seconds, server_core)
        limits = limits_accuracy(engine, workdir)
    finally:
        stop(engine_proc)
        shutil.rmtree(workdir, ignore_errors=True)
    out = {"rate": args.rate, "seconds": args.seconds, "direct": direct, "gateway": through, "litellm": peer,
           "litellm_error": peer_error,
           "added_p50_ms": round(through["p50_ms"] - direct["p50_ms"], 3) if through["p50_ms"] else None,
           "added_p99_ms": round(through["p99_ms"] - direct["p99_ms"], 3) if through["p99_ms"] else None,
           "redis_round_trips_per_request": round(trips, 3), "limits": limits, "gateway_rss_mb": round(rss, 1),
           "snapshot": {"keys": KEYS, "services": SERVICES, "active_keys": ACTIVE_KEYS},
           "server_core": server_core}
    for name in ("direct", "gateway", "litellm"):
        figures = out[name]
        if figures:
            print(f"{name:<8} p50 {figures['p50_ms']} ms, p99 {figures['p99_ms']} ms, {figures['rps']} requests/s "
                  f"answered ({figures['failed']} failed) at {args.rate:g}/s offered")
        else:
            print(f"{name:<8} not run: {out['litellm_error']}")
    print(f"added by the gateway: p50 {out['added_p50_ms']} ms, p99 {out['added_p99_ms']} ms; Redis round trips per "
          f"request {out['redis_round_trips_per_request']}; RSS {out['gateway_rss_mb']} MB with {KEYS:,} keys and "
          f"{SERVICES:,} services")
    print(f"limits: {limits['replicas']} replicas x {limits['clients']} clients sent {limits['sent']} against "
          f"{limits['limit_rpm']}/min: {limits['allowed']} allowed")
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
