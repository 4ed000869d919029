"""The door's queue, from one run: fair share against FCFS, priority bands, its cost at no load, and its Redis
round trips.

    .venv/bin/python bench/fairness.py [--seconds 20] [--batch-lines 5000] [--json]

An engine of `--slots` sequences at once (a small aiohttp upstream: the first token after a prefill time,
the rest after a time per output token; each request's start is logged) stands for a saturated service; the
gateway (`python -m gateway`, limits and fair-share counters in Redis) sees it through a routing snapshot
whose `max_outstanding` is those slots.

1. Fairness. Two tenants with equal weights on one service, a key each: one floods at 10x its share (open loop),
   the other keeps a steady `--steady` requests in flight (closed loop). From the engine's log of starts and the
   clients' send times: while both have requests waiting, the largest difference of the cost (prompt + 2 x
   output tokens) the engine started for each over any window. Through three gateway replicas sharing Redis
   (`--replicas`), through one (printed, not in the JSON), and with the queue off (`--no-queue`: FCFS, the order
   of arrival).
   The control plane gives a service to one tenant; the bench's snapshot lists the one service under both
   tenants, so that the door's order between tenants is what is measured.
   Printed beside the gaps, not in the JSON: requests sent and started, the engine's sequences busy on average
   (how much of the engine the order used), served cost per flow, and the replicas' Redis round trips per
   request sent, the requests' own apart from the shared order's (gateway/order.py), with its decisions.
2. Priority. An interactive key (streamed, its usual load) alone, then beside a batch of `--batch-lines` lines
   (`x-priority: batch`, a runner keeping 16 in flight and sending again on 429) and a best-effort flood:
   TTFT p95 both times, and how many batch lines completed. The interactive client runs in a process of its
   own both times, so the batch's and the flood's client (this process) does not delay its reads. Printed, not
   in the JSON: the engine's own TTFT p95 (from receiving a request to writing its first event), both times.
3. Cost. bench/gateway.py's instant engine and load at 20 requests/s, through a gateway with the queue on (a
   bound the load never reaches) and off, in turn twice: the p50 difference, and Redis round trips per request.

`--json` ends with one JSON object on one line: fairness {max_served_cost_gap, vtc_bound,
fcfs_max_served_cost_gap}, priority {interactive_ttft_p95_s, idle_ttft_p95_s, batch_lines, batch_completed},
added_p50_ms_delta, redis_round_trips_per_request, gateway_replicas. Needs Redis (`GATEWAY_BENCH_REDIS`).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import gateway as gw  # noqa: E402
from bench.common import free_port  # noqa: E402
from gateway.fairness import cost  # noqa: E402

PREFILL_S, DECODE_S = 0.01, 0.005  # the engine: first token after this, then this per output token
PROMPT_TOKENS = 64  # 4 characters a token, as the gateway estimates
OUTPUTS = (16, 64)  # output tokens of the fairness flows' requests, drawn uniformly
KEY_NAMES = ("flood", "steady", "interactive", "batch", "best-effort")
TENANTS = {"flood": 1, "steady": 2}  # the fairness flows' tenants (equal weights); the other keys are tenant 1's
ORDER_DECISIONS = ("looks", "holds", "overridden", "lent", "borrowed")  # gateway_order_decisions' labels


# --- the engine -------------------------------------------------------------------------------------------------


def serve_engine(port: int, slots: int) -> None:
    from aiohttp import web

    gate = asyncio.Semaphore(slots)
    log: list[dict] = []

    def event(payload: dict) -> bytes:
        return b"data: " + json.dumps(payload).encode() + b"\n\n"

    async def complete(request: web.Request) -> web.StreamResponse:
        received = time.monotonic()
        body = await request.json()
        prompt, output = len(body.get("prompt") or "") // 4, int(body.get("max_tokens") or 16)
        usage = {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": prompt + output}
        async with gate:  # FIFO: the engine's own waiting queue
            entry = {"user": body.get("user"), "at": time.monotonic(), "cost": cost(prompt, output)}
            log.append(entry)
            if not body.get("stream"):
                await asyncio.sleep(PREFILL_S + output * DECODE_S)
                entry["busy_s"] = time.monotonic() - entry["at"]
                return web.json_response({"id": "f", "object": "text_completion", "usage": usage,
                                          "choices": [{"index": 0, "text": "a", "finish_reason": "length"}]})
            response = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await response.prepare(request)
            await asyncio.sleep(PREFILL_S)
            first = {"id": "f", "object": "text_completion", "choices": [{"index": 0, "text": "a"}]}
            await response.write(event(first))
            entry["first_s"] = time.monotonic() - received  # the engine's own TTFT, its queue included
            await asyncio.sleep(output * DECODE_S)
            await response.write(event({"id": "f", "object": "text_completion", "choices": [], "usage": usage}))
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            entry["busy_s"] = time.monotonic() - entry["at"]
            return response

    async def take_log(request: web.Request) -> web.Response:
        taken = list(log)
        log.clear()
        return web.json_response(taken)

    app = web.Application()
    app.router.add_post("/v1/completions", complete)
    app.router.add_get("/log", take_log)
    app.router.add_get("/v1/models", lambda request: web.json_response({"data": []}))
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


@contextmanager
def engine_process(slots: int) -> Iterator[str]:
    """The engine of `slots` sequences in a process of its own; its address."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve-engine", str(port), "--slots", str(slots)], cwd=ROOT)
    try:
        gw.wait_http(f"http://127.0.0.1:{port}/v1/models")
        yield f"127.0.0.1:{port}"
    finally:
        gw.stop(proc)


def engine_log(engine: str) -> list[dict]:
    from urllib.request import urlopen

    with urlopen(f"http://{engine}/log", timeout=10) as response:
        return json.loads(response.read())


# --- the snapshot -------------------------------------------------------------------------------------------------


def write_snapshot(path: Path, engine: str, max_outstanding: int | None) -> dict[str, str]:
    """One service at the engine, a key per flow (all band 0: a request lowers its own), two tenants of equal
    weights: the steady key is tenant 2's, every other tenant 1's. The keys' plaintexts by name.

    The control plane gives a service to one tenant; the bench lists the one service (one id, so one door and one
    band's counters) under each tenant, so that two tenants share it as the fairness aim asks."""
    keys = {name: f"sk-fair-{name}-{uuid.uuid4().hex}" for name in KEY_NAMES}
    service = {"id": 1, "tenant_id": 1, "name": "svc", "served_model": "llama-8b", "adapters": [],
               "routing_policy": "round_robin", "routed": False, "wakes": False, "ready_engines": 1,
               "endpoints": [{"pod": "engine-0", "address": engine}], "max_outstanding": max_outstanding}
    data = {"format": 1, "built_at": "bench", "tenants": {str(t): {"weight": 1} for t in TENANTS.values()},
            "services": [{**service, "tenant_id": t} for t in sorted(set(TENANTS.values()))],
            "keys": {hashlib.sha256(plain.encode()).hexdigest(): {
                "id": i + 1, "tenant_id": TENANTS.get(name, 1), "services": None, "expires_at": time.time() + 86400,
                "priority": 0, "rpm": None, "tpm": None, "concurrency": None, "monthly_token_budget": None}
                for i, (name, plain) in enumerate(keys.items())}}
    path.write_text(json.dumps(data))
    return keys


# --- clients ------------------------------------------------------------------------------------------------------


class Clients:
    """Requests spread over the gateways in turn; what each flow sent, and when."""

    def __init__(self, session, bases: list[str], keys: dict[str, str]):
        self.session, self.bases, self.keys = session, bases, keys
        self.sent: dict[str, list[float]] = {}
        self._turn = 0

    async def send(self, name: str, output: int, *, priority: str | None = None, stream: bool = False):
        """(status, TTFT in seconds or None)."""
        self._turn += 1
        headers = {"authorization": f"Bearer {self.keys[name]}"}
        if priority:
            headers["x-priority"] = priority
        body = {"model": "svc", "prompt": "abcd" * PROMPT_TOKENS, "max_tokens": output, "user": name,
                "stream": stream}
        started = time.monotonic()
        self.sent.setdefault(name, []).append(started)
        async with self.session.post(f"{self.bases[self._turn % len(self.bases)]}/v1/completions", json=body,
                                     headers=headers) as response:
            first = await response.content.readany()
            ttft = time.monotonic() - started if response.status == 200 and first else None
            await response.read()
            return response.status, ttft


async def open_loop(rate: float, seconds: float, send) -> None:
    began, tasks = time.monotonic(), []
    try:
        for i in range(int(rate * seconds)):
            delay = began + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(send()))
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:  # cut short: what is still waiting is abandoned (its clients leave)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def closed_loop(clients: int, until: float, send) -> None:
    async def one():
        while time.monotonic() < until:
            await send()

    await asyncio.gather(*(one() for _ in range(clients)))


def session():
    import aiohttp

    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=900))


# --- 1. fairness --------------------------------------------------------------------------------------------------


def max_gap(log: list[dict], sent: dict[str, list[float]], a: str, b: str) -> int:
    """The largest |served_a - served_b| over any window while both flows had requests sent and not started."""
    log = sorted(log, key=lambda entry: entry["at"])
    started = {a: 0, b: 0}
    served = {a: 0, b: 0}
    gap, low, high, backlogged = 0, None, None, False
    for entry in log:
        user = entry["user"]
        if user not in served:
            continue
        waiting = all(sum(1 for t in sent[f] if t <= entry["at"]) > started[f] for f in (a, b))
        if waiting and not backlogged:
            low = high = served[a] - served[b]
        backlogged = waiting
        started[user] += 1
        served[user] += entry["cost"]
        if backlogged:
            diff = served[a] - served[b]
            low, high = min(low, diff), max(high, diff)
            gap = max(gap, high - low)
    return gap


async def _fairness(bases, keys, slots: int, seconds: float, steady: int, seed: int) -> dict:
    rng = random.Random(seed)
    mean_s = PREFILL_S + sum(OUTPUTS) / 2 * DECODE_S
    share = slots / mean_s / 2  # each flow's half of the engine, requests per second
    async with session() as http:
        clients = Clients(http, bases, keys)
        until = time.monotonic() + seconds
        both = asyncio.gather(
            open_loop(10 * share, seconds, lambda: clients.send("flood", rng.randint(*OUTPUTS))),
            closed_loop(steady, until, lambda: clients.send("steady", rng.randint(*OUTPUTS))))
        with suppress(TimeoutError):  # the window ends at `seconds`: the flood's backlog is abandoned, not drained
            await asyncio.wait_for(both, seconds)
    return clients.sent


def metric(base: str, name: str) -> float:
    """The sum of a /metrics family's samples (0 when the gateway has none)."""
    from urllib.request import urlopen

    with urlopen(f"{base}/metrics", timeout=5) as response:
        lines = response.read().decode().splitlines()
    return sum(float(line.split()[-1]) for line in lines if line.startswith((name + " ", name + "{")))


def fairness(engine: str, workdir: Path, args, *, queue: bool, replicas: int = 1) -> dict:
    """The served-cost gap, and what it took: requests the engine started (both flows), the replicas' Redis
    round trips (the requests' own and the shared order's) and the order's holds."""
    snap = workdir / f"fair-{queue}-{replicas}.json"
    keys = write_snapshot(snap, engine, args.slots)
    extra = ("--replicas", str(replicas)) if queue else ("--no-queue",)
    prefix = f"bench:{uuid.uuid4().hex}:"  # one for the replicas: they share the counters
    procs = [gw.start_gateway(snap, prefix, None, *extra, "--queue-cap", "100000", "--queue-ttl", "600")
             for _ in range(replicas)]
    try:
        sent = asyncio.run(_fairness([base for _, base in procs], keys, args.slots, args.seconds, args.steady,
                                     args.seed))
        log = engine_log(engine)
        return {"gap": max_gap(log, sent, "flood", "steady"), "started": len(log),
                "sent": sum(len(times) for times in sent.values()),
                # The engine's sequences busy on average over the run (of --slots): how much of it the order used.
                "busy_slots": round(sum(entry.get("busy_s", 0) for entry in log) / args.seconds, 2),
                "served_cost": {name: sum(e["cost"] for e in log if e["user"] == name) for name in ("flood", "steady")},
                "round_trips": sum(metric(base, "gateway_redis_round_trips") for _, base in procs),
                "order_round_trips": sum(metric(base, "gateway_order_round_trips") for _, base in procs),
                "held": {decision: sum(metric(base, f'gateway_order_decisions{{decision="{decision}"}}')
                                       for _, base in procs) for decision in ORDER_DECISIONS}}
    finally:
        for proc, _ in procs:
            gw.stop(proc)


# --- 2. priority --------------------------------------------------------------------------------------------------


def p95(values: list[float]) -> float | None:
    values = sorted(v for v in values if v is not None)
    return round(values[min(len(values) - 1, int(0.95 * len(values)))], 4) if values else None


async def _interactive(clients: Clients, rate: float, seconds: float) -> list[float]:
    ttfts: list[float] = []

    async def one():
        status, ttft = await clients.send("interactive", 16, stream=True)
        if status == 200:
            ttfts.append(ttft)

    await open_loop(rate, seconds, one)
    return ttfts


def measure_interactive(base: str, key: str, rate: float, seconds: float) -> None:
    """The interactive client as a process of its own: its TTFTs as one JSON list on stdout."""
    async def run():
        async with session() as http:
            return await _interactive(Clients(http, [base], {"interactive": key}), rate, seconds)

    print(json.dumps(asyncio.run(run())))


async def _interactive_process(base: str, key: str, args) -> list[float]:
    """TTFTs measured by a client process of its own, idle and loaded alike: the batch's and the flood's client,
    in this process, does not delay the interactive client's reads."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--measure-interactive", base, key, "--interactive-rate", str(args.interactive_rate),
        "--seconds", str(args.seconds), cwd=ROOT, stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    return json.loads(out.decode().strip().splitlines()[-1])


def engine_ttft_p95(log: list[dict]) -> float | None:
    """The engine's own TTFT p95 for the interactive requests of `log`: from receiving one to its first event."""
    return p95([entry["first_s"] for entry in log if entry["user"] == "interactive" and "first_s" in entry])


async def _priority(base: str, engine: str, keys, args) -> tuple[dict, dict]:
    async with session() as http:
        clients = Clients(http, [base], keys)
        await asyncio.to_thread(engine_log, engine)
        idle = await _interactive_process(base, keys["interactive"], args)
        idle_engine = engine_ttft_p95(await asyncio.to_thread(engine_log, engine))
        lines = list(range(args.batch_lines))
        done = 0
        window_ends = time.monotonic() + args.batch_window

        async def runner():
            nonlocal done
            while lines and time.monotonic() < window_ends:
                lines.pop()
                while time.monotonic() < window_ends:
                    status, _ = await clients.send("batch", 8, priority="batch")
                    if status == 200:
                        done += 1
                        break
                    await asyncio.sleep(0.1)  # 429 from the queue: the line is sent again

        batch = asyncio.gather(*(runner() for _ in range(16)))
        flood = asyncio.ensure_future(open_loop(args.flood_rate, args.seconds, lambda: clients.send(
            "best-effort", 8, priority="best-effort")))
        busy = await _interactive_process(base, keys["interactive"], args)
        busy_engine = engine_ttft_p95(await asyncio.to_thread(engine_log, engine))
        await flood
        await batch
    return ({"interactive_ttft_p95_s": p95(busy), "idle_ttft_p95_s": p95(idle), "batch_lines": args.batch_lines,
             "batch_completed": done}, {"engine_idle_ttft_p95_s": idle_engine, "engine_busy_ttft_p95_s": busy_engine})


def priority(engine: str, workdir: Path, args) -> tuple[dict, dict]:
    snap = workdir / "priority.json"
    keys = write_snapshot(snap, engine, args.priority_slots)
    proc, base = gw.start_gateway(snap, f"bench:{uuid.uuid4().hex}:", None, "--queue-cap", "1000")
    try:
        return asyncio.run(_priority(base, engine, keys, args))
    finally:
        gw.stop(proc)


# --- 3. cost -------------------------------------------------------------------------------------------------------


def cost_of_queue(workdir: Path, seconds: float) -> tuple[float, float]:
    """(p50 with the queue less p50 without, ms; Redis round trips per request with the queue)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "gateway.py"), "--serve-engine", str(port)],
                            cwd=ROOT)
    engine = f"127.0.0.1:{port}"
    snap = workdir / "cost.json"
    try:
        gw.wait_http(f"http://{engine}/v1/models")
        keys = gw.snapshot(snap, engine, limit_rpm=10_000_000)
        data = json.loads(snap.read_text())
        data["services"][0]["max_outstanding"] = 1_000_000  # saturation checked on every request, never reached
        snap.write_text(json.dumps(data))
        p50s: dict[bool, list[float]] = {True: [], False: []}
        trips = 0.0
        for queue in (True, False, True, False):
            off = () if queue else ("--no-queue",)
            gateway, base = gw.start_gateway(snap, f"bench:{uuid.uuid4().hex}:", None, *off)
            try:
                gw.warm(base, keys, "svc-1")
                before = gw.round_trips(base)
                figures = gw.load(base, keys[:gw.ACTIVE_KEYS], "svc-1", 20, seconds)
                p50s[queue].append(figures["p50_ms"])
                if queue:
                    trips = (gw.round_trips(base) - before) / max(figures["answered"], 1)
            finally:
                gw.stop(gateway)
    finally:
        gw.stop(proc)
    median = {queue: sorted(values)[len(values) // 2] for queue, values in p50s.items()}
    return round(median[True] - median[False], 3), round(trips, 3)


# --- the run ------------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds of each load (default 20)")
    parser.add_argument("--slots", type=int, default=3, help="the engine's sequences at once (default 3)")
    parser.add_argument("--priority-slots", type=int, default=16,
                        help="the sequences at once of the priority run's engine (default 16)")
    parser.add_argument("--replicas", type=int, default=3, help="gateway replicas for the fair share (default 3)")
    parser.add_argument("--steady", type=int, default=6, help="the steady flow's requests in flight (default 6)")
    parser.add_argument("--batch-lines", type=int, default=5000, help="lines of the batch (default 5000)")
    parser.add_argument("--batch-window", type=float, default=240.0,
                        help="seconds the batch may take (default 240: the bench's stand-in for 24 hours)")
    parser.add_argument("--interactive-rate", type=float, default=2.0, help="interactive requests/s (default 2)")
    parser.add_argument("--flood-rate", type=float, default=30.0, help="best-effort requests/s (default 30)")
    parser.add_argument("--cost-seconds", type=float, default=10.0, help="seconds of each no-load run (default 10)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="one JSON object as the last line")
    parser.add_argument("--serve-engine", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--measure-interactive", nargs=2, metavar=("BASE", "KEY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_engine:
        serve_engine(args.serve_engine, args.slots)
        return 0
    if args.measure_interactive:
        measure_interactive(*args.measure_interactive, args.interactive_rate, args.seconds)
        return 0
    if min(args.seconds, args.slots, args.replicas, args.steady, args.batch_lines, args.batch_window,
           args.interactive_rate, args.flood_rate, args.cost_seconds) <= 0:
        parser.error("every count, rate and duration must be greater than 0")
    workdir = Path(tempfile.mkdtemp(prefix="bench-fairness-"))
    try:
        # An engine each: one left with a backlog (aiohttp runs a handler whose client left) would skew the next.
        with engine_process(args.slots) as engine:
            fcfs = fairness(engine, workdir, args, queue=False)
        with engine_process(args.slots) as engine:
            vtc = fairness(engine, workdir, args, queue=True, replicas=args.replicas)
        with engine_process(args.slots) as engine:
            one = fairness(engine, workdir, args, queue=True)
        fcfs_gap, vtc_gap, one_gap = fcfs["gap"], vtc["gap"], one["gap"]
        with engine_process(args.priority_slots) as engine:
            bands, inside = priority(engine, workdir, args)
        added, trips = cost_of_queue(workdir, args.cost_seconds)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    largest = cost(PROMPT_TOKENS, OUTPUTS[1])
    out = {"fairness": {"max_served_cost_gap": vtc_gap, "vtc_bound": 2 * largest, "fcfs_max_served_cost_gap": fcfs_gap},
           "priority": bands, "added_p50_ms_delta": added, "redis_round_trips_per_request": trips,
           "gateway_replicas": args.replicas}
    print(f"fairness: served cost gap {vtc_gap} through {args.replicas} replicas, {one_gap} through one (VTC's bound "
          f"{2 * largest}); FCFS {fcfs_gap}")
    for name, run in ((f"{args.replicas} replicas", vtc), ("1 replica", one), ("FCFS", fcfs)):
        sent = max(run["sent"], 1)
        print(f"  {name}: {run['sent']} requests sent, {run['started']} started "
              f"({run['started'] / args.seconds:.1f}/s, "
              f"{run['busy_slots']} of the engine's {args.slots} sequences busy on average), served cost "
              f"{run['served_cost']}; Redis round trips per request sent: {run['round_trips'] / sent:.2f} the "
              f"requests' own, {run['order_round_trips'] / sent:.2f} the shared order's; order {run['held']}")
    print(f"priority: interactive TTFT p95 {bands['interactive_ttft_p95_s']} s beside the batch and the flood, "
          f"{bands['idle_ttft_p95_s']} s idle; batch {bands['batch_completed']}/{bands['batch_lines']} lines done")
    print(f"  of which the engine's own (request received to first event) p95: {inside['engine_busy_ttft_p95_s']} s "
          f"beside the batch and the flood, {inside['engine_idle_ttft_p95_s']} s idle")
    print(f"cost: p50 {added:+} ms with the queue at no load; {trips} Redis round trips per request")
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
