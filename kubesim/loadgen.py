"""Load generator: OpenAI completions at a target rate through kubesim's service proxy or any base URL.

    python -m kubesim load --target default/llama:8000 --rate 20 --duration 60 --pattern poisson \
        --prompt-tokens lognormal:800:0.5 --output-tokens uniform:50:200 --shared-prefix 0.6 --sessions 8

Prompts are words of at most six characters, one token each for the simulated engines, so the prompt
token distribution is what the engines see. Each session has its own prefix (`--shared-prefix` of each
prompt) and sends `x-session-id: session-N` (`--session-header`). Requests stream, so TTFT and
inter-token latency are measured at the client; the summary prints requests, errors, TTFT p50/p95/p99,
ITL and tokens/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field

import aiohttp


def parse_dist(spec: str):
    """A sampler from `N`, `const:N`, `uniform:A:B`, `normal:MEAN:SD`, `lognormal:MEDIAN:SIGMA`, `exp:MEAN`."""
    parts = spec.split(":")
    try:
        nums = [float(x) for x in parts[1:]] if len(parts) > 1 else [float(parts[0])]
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid distribution {spec!r}") from None
    kind = parts[0] if len(parts) > 1 else "const"
    arity = {"const": 1, "uniform": 2, "normal": 2, "lognormal": 2, "exp": 1}
    if kind not in arity or len(nums) != arity[kind]:
        raise argparse.ArgumentTypeError(
            f"invalid distribution {spec!r}: use N, const:N, uniform:A:B, normal:MEAN:SD, lognormal:MEDIAN:SIGMA "
            "or exp:MEAN"
        )

    def sample(rng: random.Random) -> int:
        if kind == "const":
            v = nums[0]
        elif kind == "uniform":
            v = rng.uniform(nums[0], nums[1])
        elif kind == "normal":
            v = rng.gauss(nums[0], nums[1])
        elif kind == "lognormal":
            v = nums[0] * math.exp(rng.gauss(0, nums[1]))
        else:
            v = rng.expovariate(1 / nums[0])
        return max(1, round(v))

    sample.spec = spec
    return sample


def arrival_times(pattern: str, rate: float, duration: float, rng: random.Random) -> list[float]:
    """Send times in [0, duration) with mean `rate` per second."""
    if rate <= 0:
        return []
    if pattern == "constant":
        n = int(rate * duration)
        return [i / rate for i in range(n)]
    if pattern == "poisson":
        out, t = [], rng.expovariate(rate)
        while t < duration:
            out.append(t)
            t += rng.expovariate(rate)
        return out
    # Non-homogeneous patterns by thinning a Poisson process at the peak rate.
    if pattern == "bursty":
        period, on = 10.0, 0.25  # a quarter of every 10 s at 4x the rate, silence otherwise

        def rate_at(t):
            return rate / on if (t % period) < on * period else 0.0

        peak = rate / on
    elif pattern == "diurnal":

        def rate_at(t):
            return rate * (1 + 0.8 * math.sin(2 * math.pi * t / duration - math.pi / 2))

        peak = rate * 1.8
    else:
        raise ValueError(f"unknown pattern {pattern!r}")
    return thinned_arrivals(rate_at, peak, duration, rng)


def thinned_arrivals(rate_at, peak: float, duration: float, rng: random.Random) -> list[float]:
    """Arrival times in [0, duration) of a non-homogeneous Poisson process, by thinning against `peak`."""
    out, t = [], 0.0
    while True:
        t += rng.expovariate(peak)
        if t >= duration:
            return out
        if rng.random() * peak < rate_at(t):
            out.append(t)


def session_words(session: int, n: int) -> list[str]:
    return [f"s{session}p{i % 97}"[:6] for i in range(n)]


@dataclass
class Result:
    """One request as the client saw it (seconds)."""

    start: float
    session: int
    prompt_tokens: int
    max_tokens: int
    status: int = 0
    error: str = ""
    ttft: float | None = None
    e2e: float | None = None
    itls: list[float] = field(default_factory=list)
    completion_tokens: int = 0
    cached_tokens: int = 0


@dataclass
class LoadConfig:
    base_url: str
    rate: float
    duration: float
    pattern: str = "poisson"
    prompt_tokens: object = None
    output_tokens: object = None
    shared_prefix: float = 0.0
    sessions: int = 1
    seed: int = 0
    model: str | None = None
    chat: bool = False
    headers: dict = field(default_factory=dict)
    session_header: str = "x-session-id"
    timeout: float = 600.0


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100) or None for no values."""
    if not values:
        return None
    v = sorted(values)
    k = (len(v) - 1) * q / 100
    lo = math.floor(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


async def _one(session: aiohttp.ClientSession, cfg: LoadConfig, res: Result, prompt: str, t0: float) -> None:
    body: dict = {
        "max_tokens": res.max_tokens,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
    if cfg.model:
        body["model"] = cfg.model
    if cfg.chat:
        body["messages"] = [{"role": "user", "content": prompt}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = prompt
        path = "/v1/completions"
    headers = dict(cfg.headers)
    headers[cfg.session_header] = f"session-{res.session}"
    sent = time.monotonic()
    last = None
    try:
        async with session.post(cfg.base_url + path, json=body, headers=headers) as r:
            res.status = r.status
            if r.status != 200:
                res.error = (await r.text())[:300]
                return
            async for raw in r.content:
                line = raw.strip()
                if not line.startswith(b"data: {"):
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    res.completion_tokens = chunk["usage"].get("completion_tokens", 0)
                    details = chunk["usage"].get("prompt_tokens_details") or {}
                    res.cached_tokens = details.get("cached_tokens", 0)
                for choice in chunk.get("choices") or []:
                    text = choice.get("text") or (choice.get("delta") or {}).get("content")
                    if text:
                        now = time.monotonic()
                        if last is None:
                            res.ttft = now - sent
                        else:
                            res.itls.append(now - last)
                        last = now
        res.e2e = time.monotonic() - sent
    except (TimeoutError, aiohttp.ClientError) as e:
        res.error = f"{type(e).__name__}: {e}"


async def run(cfg: LoadConfig) -> list[Result]:
    """Send the whole schedule and return one Result per request."""
    rng = random.Random(cfg.seed)
    prompt_dist = cfg.prompt_tokens or parse_dist("512")
    output_dist = cfg.output_tokens or parse_dist("128")
    times = arrival_times(cfg.pattern, cfg.rate, cfg.duration, rng)
    plan = []
    for i, t in enumerate(times):
        s = rng.randrange(max(cfg.sessions, 1))
        n = prompt_dist(rng)
        shared = min(n, round(n * cfg.shared_prefix))
        words = session_words(s, shared) + [f"r{i}u{j % 89}"[:6] for j in range(n - shared)]
        plan.append((t, Result(start=t, session=s, prompt_tokens=n, max_tokens=output_dist(rng)), " ".join(words)))
    timeout = aiohttp.ClientTimeout(total=cfg.timeout)
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=conn) as session:
        t0 = time.monotonic()
        tasks = []
        for t, res, prompt in plan:
            delay = t0 + t - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_one(session, cfg, res, prompt, t0)))
        await asyncio.gather(*tasks)
    return [res for _, res, _ in plan]


def summarise(results: list[Result], wall: float) -> dict:
    ok = [r for r in results if not r.error and r.status == 200]
    ttfts = [r.ttft for r in ok if r.ttft is not None]
    itls = [x for r in ok for x in r.itls]
    tokens = sum(r.completion_tokens for r in ok)
    out = {
        "requests": len(results),
        "errors": len(results) - len(ok),
        "ttft_p50": percentile(ttfts, 50),
        "ttft_p95": percentile(ttfts, 95),
        "ttft_p99": percentile(ttfts, 99),
        "itl_mean": sum(itls) / len(itls) if itls else None,
        "itl_p95": percentile(itls, 95),
        "output_tokens_per_s": tokens / wall if wall > 0 else 0.0,
        "prompt_tokens": sum(r.prompt_tokens for r in ok),
        "cached_prompt_tokens": sum(r.cached_tokens for r in ok),
    }
    return out


def format_summary(s: dict) -> str:
    def ms(v):
        return "-" if v is None else f"{v * 1000:.1f} ms"

    return (
        f"requests {s['requests']}  errors {s['errors']}\n"
        f"TTFT p50 {ms(s['ttft_p50'])}  p95 {ms(s['ttft_p95'])}  p99 {ms(s['ttft_p99'])}\n"
        f"ITL mean {ms(s['itl_mean'])}  p95 {ms(s['itl_p95'])}\n"
        f"output tokens/s {s['output_tokens_per_s']:.1f}  prompt tokens {s['prompt_tokens']} "
        f"(cached {s['cached_prompt_tokens']})"
    )


def base_url_for(target: str, server: str) -> str:
    """A base URL as given, or the service proxy URL of NAMESPACE/SERVICE:PORT on the kubesim `server`."""
    if target.startswith(("http://", "https://")):
        return target.rstrip("/")
    try:
        ns, rest = target.split("/", 1)
        svc, port = rest.rsplit(":", 1)
        int(port)
    except ValueError:
        raise SystemExit(f"--target: expected NAMESPACE/SERVICE:PORT or a URL, got {target!r}") from None
    return f"{server.rstrip('/')}/api/v1/namespaces/{ns}/services/{svc}:{port}/proxy"


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = parser or argparse.ArgumentParser(
        prog="python -m kubesim load", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--target", required=True, help="NAMESPACE/SERVICE:PORT (through --server) or a base URL")
    p.add_argument("--server", default=os.environ.get("KUBESIM_SERVER", "http://127.0.0.1:6443"))
    p.add_argument("--token", default=os.environ.get("KUBESIM_TOKEN"))
    p.add_argument("--rate", type=float, required=True, help="mean requests per second")
    p.add_argument("--duration", type=float, required=True, help="seconds of arrivals")
    p.add_argument("--pattern", choices=["constant", "poisson", "bursty", "diurnal"], default="poisson")
    p.add_argument("--prompt-tokens", type=parse_dist, default=parse_dist("512"))
    p.add_argument("--output-tokens", type=parse_dist, default=parse_dist("128"))
    p.add_argument("--shared-prefix", type=float, default=0.0, help="fraction of each prompt shared per session")
    p.add_argument("--sessions", type=int, default=1)
    p.add_argument("--session-header", default="x-session-id", help="header carrying the session id")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default=None, help="model name (default: the server's own)")
    p.add_argument("--chat", action="store_true", help="use /v1/chat/completions")
    p.add_argument("--out", default=None, help="write one JSON line per request")
    return p


def main(argv: list[str] | None = None, args: argparse.Namespace | None = None) -> int:
    args = args or build_parser().parse_args(argv)
    if not 0 <= args.shared_prefix <= 1:
        raise SystemExit("--shared-prefix must be between 0 and 1")
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    cfg = LoadConfig(
        base_url=base_url_for(args.target, args.server),
        rate=args.rate,
        duration=args.duration,
        pattern=args.pattern,
        prompt_tokens=args.prompt_tokens,
        output_tokens=args.output_tokens,
        shared_prefix=args.shared_prefix,
        sessions=args.sessions,
        seed=args.seed,
        model=args.model,
        chat=args.chat,
        headers=headers,
        session_header=args.session_header,
    )
    t0 = time.monotonic()
    results = asyncio.run(run(cfg))
    wall = time.monotonic() - t0
    if args.out:
        with open(args.out, "w") as f:
            for r in results:
                f.write(json.dumps(asdict(r)) + "\n")
    print(format_summary(summarise(results, wall)))
    return 0 if results and all(not r.error for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
