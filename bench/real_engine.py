"""kubesim's simulated vLLM against the real one (vLLM's CPU build, the `engines` extra) on one request sequence.

    .venv/bin/python bench/real_engine.py [--blocks 24] [--requests 16] [--real-url URL] [--json]

Both engines get the same arguments, a KV pool small enough to force preemption (`--num-gpu-blocks-override`)
and prefix caching, and the same requests as token ids (a shared prefix, a distinct tail, a fixed output
length), all sent at once. Printed: each engine's prefix-cache hits (tokens) and preemptions over the run,
the peak running and waiting counts seen by polling /metrics, and the metric families: what the real engine
exports that the simulation does not (each with the reason in kubesim.engines.metrics.NOT_MODELLED) and the
families whose label names or histogram buckets differ. With --json the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from enginevocab.vllm import IMAGE_REF, VERSION
from kubesim.cluster.nodes import REAL_ENGINE_MEMORY_MIB
from kubesim.engines import workload_for
from kubesim.engines.harness import pod_context
from kubesim.engines.metrics import NOT_MODELLED
from kubesim.engines.real import memory_share

ROOT = Path(__file__).resolve().parents[1]
SERVED = "tiny"
SIM_MODEL = "meta-llama/Llama-3.1-8B-Instruct"  # the simulation's model facts; its speed is not compared
READY_SECONDS = 300


def engine_args(blocks: int = 24, block_size: int = 32, max_seqs: int = 16) -> list[str]:
    """The arguments both engines get besides the model (the tests' session engine gets the defaults)."""
    return ["--served-model-name", SERVED, "--max-model-len", "512", "--num-gpu-blocks-override", str(blocks),
            "--block-size", str(block_size), "--enable-prefix-caching", "--max-num-seqs", str(max_seqs),
            "--enable-lora", "--max-lora-rank", "8", "--max-loras", "1"]


def families(text: str) -> dict[str, dict]:
    """{family: {"type", "labels" (sorted names, `le` aside), "buckets" (histograms' bounds)}} of an exposition."""
    out: dict[str, dict] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("vllm:"):
            continue
        labels = sorted({k for s in family.samples for k in s.labels if k != "le"})
        buckets = sorted({s.labels["le"] for s in family.samples if s.name.endswith("_bucket")}, key=float)
        out[family.name] = {"type": family.type, "labels": labels, "buckets": buckets}
    return out


def compare_families(real_text: str, sim_text: str) -> dict:
    """What the real exposition has that the simulated one lacks (with reasons) or has otherwise."""
    real, sim = families(real_text), families(sim_text)
    missing = [{"family": name, "reason": NOT_MODELLED.get(name, "")} for name in sorted(set(real) - set(sim))]
    mismatches = [{"family": name, "real": real[name], "sim": sim[name]}
                  for name in sorted(set(real) & set(sim)) if real[name] != sim[name]]
    return {"families_real": len(real), "families_sim": len(sim), "missing_in_sim": missing,
            "label_mismatches": mismatches}


def counter(text: str, family: str) -> float:
    """The sum of a family's samples (a counter's `_total`, a gauge's value) over its label sets."""
    return sum(s.value for f in text_string_to_metric_families(text) if f.name == family
               for s in f.samples if s.name in (family, family + "_total"))


def sequence(requests: int, prefix: int, tail: int, variant: int = 0) -> list[list[int]]:
    """Token-id prompts: one shared prefix and a distinct tail each (ids the tiny vocabulary has). Another
    `variant` shares another prefix, so a run against an engine that served an earlier one starts its cache cold."""
    shared = [100 + variant * prefix + i for i in range(prefix)]
    return [shared + [1000 + 37 * r + i for i in range(tail)] for r in range(requests)]


async def run_sequence(base: str, prompts: list[list[int]], output: int) -> dict:
    """Send every prompt at once; return the counters' increase and the peak running/waiting seen."""
    async with aiohttp.ClientSession() as session:
        async def metrics() -> str:
            async with session.get(base + "/metrics") as response:
                return await response.text()

        async def one(prompt):
            body = {"model": SERVED, "prompt": prompt, "max_tokens": output, "ignore_eos": True, "temperature": 0}
            async with session.post(base + "/v1/completions", json=body) as response:
                assert response.status == 200, await response.text()
                return (await response.json())["usage"]

        before = await metrics()
        tasks = [asyncio.ensure_future(one(p)) for p in prompts]
        peaks = {"running": 0.0, "waiting": 0.0}
        while not all(t.done() for t in tasks):
            text = await metrics()
            for key in peaks:
                peaks[key] = max(peaks[key], counter(text, f"vllm:num_requests_{key}"))
            await asyncio.sleep(0.05)
        usages = await asyncio.gather(*tasks)
        after = await metrics()
    return {
        "prefix_hit_tokens": counter(after, "vllm:prefix_cache_hits") - counter(before, "vllm:prefix_cache_hits"),
        "preemptions": counter(after, "vllm:num_preemptions") - counter(before, "vllm:num_preemptions"),
        "peak_running": peaks["running"], "peak_waiting": peaks["waiting"],
        "completion_tokens": sum(u["completion_tokens"] for u in usages), "exposition": after,
    }


async def simulated(args, prompts) -> dict:
    workload = workload_for(pod_context(IMAGE_REF, [SIM_MODEL, *engine_args(args.blocks, args.block_size,
                                                                             args.max_seqs)], gpu_key="l4-24gb"))
    await workload.start()
    while not workload.ready():
        await asyncio.sleep(0.05)
    try:
        return await run_sequence(workload.base_url, prompts, args.output)
    finally:
        await workload.stop()


def start_real(models: Path, args, log) -> tuple[subprocess.Popen, str]:
    from bench.common import free_port

    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "enginevocab.vllm_launch", "--model", str(models / "tiny"), "--host", "127.0.0.1",
         "--port", str(port), "--gpu-memory-utilization", memory_share(REAL_ENGINE_MEMORY_MIB),
         *engine_args(args.blocks, args.block_size, args.max_seqs)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return process, f"http://127.0.0.1:{port}"


async def until_healthy(base: str, process: subprocess.Popen, log) -> None:
    deadline = time.monotonic() + READY_SECONDS
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline and process.poll() is None:
            try:
                async with session.get(base + "/health") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.5)
    log.seek(0)
    raise SystemExit("the real engine did not become healthy:\n" + "\n".join(log.read().splitlines()[-15:]))


async def main_async(args) -> dict:
    from kubesim.tinymodel import tiny_model

    prompts = sequence(args.requests, args.prefix, args.tail, args.variant)
    sim = await simulated(args, prompts)
    if args.real_url:
        real = await run_sequence(args.real_url.rstrip("/"), prompts, args.output)
        return summary(real, sim)
    with tempfile.TemporaryDirectory() as models:
        tiny_model(Path(models) / "tiny")
        log = open(Path(models) / "vllm.log", "w+")  # noqa: SIM115 - read back on failure
        process, base = start_real(Path(models), args, log)
        try:
            await until_healthy(base, process, log)
            real = await run_sequence(base, prompts, args.output)
        finally:
            os.killpg(process.pid, 15)
            process.wait(30)
    return summary(real, sim)


def summary(real: dict, sim: dict) -> dict:
    """The JSON result: the families compared, and each figure of the run for both engines."""
    result = {"vllm_version": VERSION, **compare_families(real.pop("exposition"), sim.pop("exposition"))}
    for key in ("prefix_hit_tokens", "preemptions", "peak_running", "peak_waiting", "completion_tokens"):
        result[key] = {"sim": sim[key], "real": real[key]}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=24, help="--num-gpu-blocks-override of both engines")
    parser.add_argument("--block-size", type=int, default=32, help="a multiple of 32 (the CPU attention's)")
    parser.add_argument("--max-seqs", type=int, default=16)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--prefix", type=int, default=64, help="tokens every prompt shares")
    parser.add_argument("--tail", type=int, default=48, help="tokens of each prompt's own")
    parser.add_argument("--output", type=int, default=64, help="tokens each request generates")
    parser.add_argument("--variant", type=int, default=0, choices=range(8),
                        help="which shared prefix the prompts use (another one for a second run on one engine)")
    parser.add_argument("--real-url", default=None,
                        help="a running real engine started with these arguments and a fresh prefix cache (the "
                             "tests' session engine), instead of starting one")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = asyncio.run(main_async(args))
    print(f"vLLM {result['vllm_version']}: {result['families_real']} families real, {result['families_sim']} "
          "simulated")
    for row in result["missing_in_sim"]:
        print(f"  not simulated: {row['family']} ({row['reason'] or 'no reason recorded'})")
    for row in result["label_mismatches"]:
        print(f"  differs: {row['family']} real {row['real']} sim {row['sim']}")
    print(f"{'':22}{'sim':>10}{'real':>10}")
    for key in ("prefix_hit_tokens", "preemptions", "peak_running", "peak_waiting", "completion_tokens"):
        print(f"{key:22}{result[key]['sim']:>10g}{result[key]['real']:>10g}")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
