"""Sleep instead of zero, measured on kubesim's simulated vLLM (its simulated clock):

    .venv/bin/python bench/sleep_wake.py [--json]

- activation_s: a request at zero (the replica asleep at level 1) to its first token, for Llama-3.1-8B on one L4
  and Llama-3.1-70B on 4 x H100 SXM: the gateway's wake (gateway/wake.py) then a streamed request, on an engine
  started with --enable-sleep-mode and its endpoints (time scale 1: simulated seconds are wall seconds).
- gpu_hours / activation_p95_s: a day of the demo's serverless traffic (the Procfile's `wake` process: one
  request, then a pause) on the demo's serverless service (Mistral-7B on one L4, idle window from seed_demo),
  under sleep (the pod keeps its GPU all day; each request waits a wake) and under delete (each request waits a
  cold start: kubesim's start-up, weights ÷ storage bandwidth + warm-up; the GPU is held from the start through
  the answer and the idle window). The activation of a request is measured on the engine like the above.
`--json` prints `figures()` on one line; bench/cold_start.py imports `figures()`.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402

from apps.autoscaling.idle import choose  # noqa: E402
from apps.serving.idle_spec import IdleSpec  # noqa: E402
from enginevocab import vllm as vllm_vocab  # noqa: E402
from gateway.wake import Waker  # noqa: E402
from kubesim.engines import workload_for  # noqa: E402
from kubesim.engines.harness import pod_context, start  # noqa: E402

SCALE = 1.0  # simulated seconds per wall second (1: the least noise from a busy machine)
CASES = {  # figure key → (model, GPU, GPUs)
    "llama-8b-l4": ("meta-llama/Llama-3.1-8B-Instruct", "l4-24gb", 1),
    "llama-70b-4xh100": ("meta-llama/Llama-3.1-70B-Instruct", "h100-sxm-80gb", 4),
}
DEMO_MODEL, DEMO_GPU = "mistralai/Mistral-7B-Instruct-v0.3", "l4-24gb"
DAY_S = 86400.0


def demo_traffic() -> dict:
    """The Procfile's `wake` load: its pause between requests and the request's prompt and output tokens."""
    line = next(x for x in (ROOT / "Procfile").read_text().splitlines() if x.startswith("wake:"))
    pause = [int(s) for s in re.findall(r"sleep (\d+)", line)][-1]
    duration = float(re.search(r"--duration (\d+)", line).group(1))
    return {"period_s": pause + duration, "prompt": int(re.search(r"--prompt-tokens (\d+)", line).group(1)),
            "output": int(re.search(r"--output-tokens (\d+)", line).group(1))}


def demo_idle_policy() -> dict:
    """The demo serverless service's idle policy: seed_demo's SERVERLESS_IDLE (window, when_idle, wake objective),
    read from its source (a literal), so the bench needs no Django settings."""
    source = (ROOT / "apps/serving/management/commands/seed_demo.py").read_text()
    tree = ast.parse(source)
    node = next(n for n in tree.body
                if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "SERVERLESS_IDLE")
    return ast.literal_eval(node.value)


def _ctx(model: str, gpu: str, gpus: int, *, fast_start: bool = True):
    args = ["--model", model, "--max-model-len", "8192", "--tensor-parallel-size", str(gpus),
            vllm_vocab.SLEEP_MODE_FLAG]
    return pod_context(vllm_vocab.IMAGE_REF, args, gpu_key=gpu, gpu_count=gpus, env=vllm_vocab.SLEEP_ENDPOINTS_ENV,
                       annotations={"kubesim.io/time-scale": str(SCALE)}, fast_start=fast_start)


async def _first_token(session: aiohttp.ClientSession, model: str, prompt: int, output: int) -> float:
    """The monotonic time the stream's first bytes came (the stream is read to its end)."""
    body = {"model": model, "prompt": "x " * prompt, "max_tokens": output, "stream": True, "ignore_eos": True}
    first = None
    async with session.post("/v1/completions", json=body) as response:
        response.raise_for_status()
        async for _ in response.content.iter_any():
            first = first or time.monotonic()
    return first


async def wake_to_first_token(model: str, gpu: str, gpus: int, prompt: int = 200, output: int = 32) -> dict:
    """Simulated seconds from a request at a sleeping replica to its first token, and on the awake replica."""
    engine = await start(_ctx(model, gpu, gpus))
    try:
        async with aiohttp.ClientSession(base_url=engine.base_url) as session:
            await _first_token(session, model, prompt, output)  # warm: the awake TTFT is measured next
            started = time.monotonic()
            awake = (await _first_token(session, model, prompt, output) - started) * SCALE
            async with session.post(vllm_vocab.SLEEP_PATH, params={"level": "1"}) as response:
                response.raise_for_status()
            service = {"id": 1, "sleeping": {"level": 1, "since": "bench",
                                             "engines": [engine.base_url.removeprefix("http://")]}}
            started = time.monotonic()
            await Waker().wake_if_asleep(service)
            first = await _first_token(session, model, prompt, output)
            return {"from_sleep": (first - started) * SCALE, "awake": awake}
    finally:
        await engine.stop()


def cold_start_s(model: str, gpu: str, gpus: int) -> float:
    """kubesim's start-up of a new replica (not fast-started): weights ÷ storage bandwidth + warm-up."""
    return workload_for(_ctx(model, gpu, gpus, fast_start=False)).startup_seconds() * SCALE


def day(traffic: dict, window_s: int, measured: dict, cold_s: float, gpus: int = 1) -> dict:
    """GPU-hours and activation over a day of the demo's requests: every request finds the service idle (the
    pause outlasts the window), so each waits a wake (sleep) or a cold start (delete)."""
    period = traffic["period_s"]
    requests = int(DAY_S // period)
    answer_s = measured["awake"]  # to the first token; the 32 tokens after it add well under a second
    delete_held = requests * (cold_s + answer_s + window_s)
    return {"requests": requests,
            "gpu_hours": {"sleep": round(DAY_S * gpus / 3600, 2), "delete": round(delete_held * gpus / 3600, 2)},
            "activation_p95_s": {"sleep": round(measured["from_sleep"], 2), "delete": round(cold_s + answer_s, 2)}}


async def _measure() -> tuple[dict, dict]:
    cases = {key: await wake_to_first_token(*case) for key, case in CASES.items()}
    traffic = demo_traffic()
    demo = await wake_to_first_token(DEMO_MODEL, DEMO_GPU, 1, traffic["prompt"], traffic["output"])
    return cases, demo


def report() -> dict:
    cases, demo = asyncio.run(_measure())
    traffic, policy = demo_traffic(), demo_idle_policy()
    window = policy["scale_to_zero_after_seconds"]
    cold = cold_start_s(DEMO_MODEL, DEMO_GPU, 1)
    daily = day(traffic, window, demo, cold)
    # The rule's pick for the demo service after a day of this traffic: each gap from idle to the next request.
    gap = traffic["period_s"] - window - demo["awake"]
    spec = IdleSpec(policy["when_idle"], policy.get("sleep_level", 1), policy["wake_objective_seconds"])
    picked = choose(spec, gaps_s=[gap] * daily["requests"], wake_s=demo["from_sleep"], cold_start_s=cold, gpus=1)
    cold_cases = {key: cold_start_s(*case) for key, case in CASES.items()}
    return {"figures": {"activation_s": {k: round(v["from_sleep"], 2) for k, v in cases.items()},
                        "gpu_hours": daily["gpu_hours"], "activation_p95_s": daily["activation_p95_s"]},
            "cold_start_s": {k: round(v, 1) for k, v in cold_cases.items()}, "demo": {
                "traffic": traffic, "idle_window_s": window, "cold_start_s": round(cold, 1),
                "requests_a_day": daily["requests"], "rule": {"action": picked.action, "reason": picked.reason}}}


def figures() -> dict:
    """activation_s {llama-8b-l4, llama-70b-4xh100}, gpu_hours {sleep, delete}, activation_p95_s {sleep, delete}."""
    return report()["figures"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print figures() as one JSON line")
    args = parser.parse_args()
    out = report()
    if args.json:
        print(json.dumps(out["figures"], separators=(",", ":")))
        return
    fig = out["figures"]
    for key, seconds in fig["activation_s"].items():
        print(f"{key}: request at a sleeping replica → first token {seconds:.2f} s "
              f"(kubesim's start-up of a new replica: {out['cold_start_s'][key]:.1f} s)")
    demo = out["demo"]
    print(f"demo serverless day ({demo['requests_a_day']} requests, one every {demo['traffic']['period_s']:g} s, "
          f"idle window {demo['idle_window_s']} s, cold start {demo['cold_start_s']} s):")
    for mode in ("sleep", "delete"):
        print(f"  {mode:6s} {fig['gpu_hours'][mode]:6.2f} GPU-h, activation p95 {fig['activation_p95_s'][mode]:.2f} s")
    print(f"the rule (when_idle auto) picks {demo['rule']['action']}: {demo['rule']['reason']}")


if __name__ == "__main__":
    main()
