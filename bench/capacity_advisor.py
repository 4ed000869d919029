"""Do the sizing advisor's picks hold? For three loads, deploy the top suggestion in kubesim and measure.

    .venv/bin/python bench/capacity_advisor.py [--duration 40] [--case N]

For each case the advisor (capacity.advisor, the roofline kubesim's engines step with) ranks GPU kind × TP ×
replicas; the top pick is started in-process as `replicas` simulated vLLM engines with the suggested flags
(`-tp`, `--max-model-len`, `--gpu-memory-utilization`) on the suggested GPU, with fast start. kubesim's
load generator then sends Poisson arrivals at the rate for `--duration` seconds (real time), split evenly
over the replicas as a random router would, and the script prints the measured TTFT p95 (at the client,
streaming) beside the prediction and the SLO.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from capacity.advisor import Load, suggest
from capacity.gpus import GPUS
from capacity.known import KNOWN_MODELS
from enginevocab.vllm import IMAGE_REF as VLLM_IMAGE_REF
from kubesim import loadgen
from kubesim.engines.harness import pod_context, start

VLLM = VLLM_IMAGE_REF
# model, load, the GPU kinds the cluster offers (the advisor ranks only those)
CASES = [
    ("meta-llama/Llama-3.1-8B-Instruct", Load(rate=16, prompt_tokens=512, output_tokens=128, ttft_slo_s=0.5),
     ["l4-24gb"]),
    ("Qwen/Qwen2.5-7B-Instruct", Load(rate=12, prompt_tokens=512, output_tokens=128, ttft_slo_s=0.5),
     ["rtx4090-24gb"]),
    ("meta-llama/Llama-3.1-70B-Instruct", Load(rate=2, prompt_tokens=2048, output_tokens=128, ttft_slo_s=2.0),
     ["h100-sxm-80gb", "a100-sxm-80gb"]),
]


async def measure(model: str, load: Load, pick, duration: float, seed: int) -> dict:
    args = ["--model", model, "--max-model-len", str(pick.max_model_len), "--gpu-memory-utilization",
            str(pick.gpu_memory_utilization), "--tensor-parallel-size", str(pick.tp)]
    engines = [await start(pod_context(VLLM, args, gpu_key=pick.gpu, gpu_count=pick.tp, name=f"engine-{i}",
                                       seed=seed + i))
               for i in range(pick.replicas)]
    try:
        # One Poisson stream of rate R / replicas per engine: the split a random router makes (and the
        # advisor assumes), without a router hop competing for this one process's CPU.
        configs = [loadgen.LoadConfig(
            base_url=w.base_url, rate=load.rate / pick.replicas, duration=duration, pattern="poisson",
            prompt_tokens=loadgen.parse_dist(str(load.prompt_tokens)),
            output_tokens=loadgen.parse_dist(str(load.output_tokens)), seed=seed * 100 + i,
        ) for i, w in enumerate(engines)]
        t0 = time.monotonic()
        results = [r for batch in await asyncio.gather(*(loadgen.run(c) for c in configs)) for r in batch]
        return loadgen.summarise(results, time.monotonic() - t0)
    finally:
        for w in engines:
            await w.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=40.0, help="seconds of arrivals per case")
    parser.add_argument("--case", type=int, choices=range(1, len(CASES) + 1), help="run only this case")
    opts = parser.parse_args()
    print(f"{'case':<44} {'top pick':<28} {'predicted':>9} {'measured':>9} {'SLO':>6}  result")
    for number, (model, load, offered) in enumerate(CASES, 1):
        if opts.case and number != opts.case:
            continue
        picks = suggest(KNOWN_MODELS[model], load, gpus={k: GPUS[k] for k in offered}, limit=1)
        name = f"{model.split('/')[-1]} {load.rate:g} req/s {load.prompt_tokens}+{load.output_tokens}"
        if not picks:
            print(f"{name:<44} no option meets the load")
            continue
        pick = picks[0]
        summary = asyncio.run(measure(model, load, pick, opts.duration, seed=number))
        p95 = summary["ttft_p95"]
        verdict = "meets SLO" if p95 is not None and p95 <= load.ttft_slo_s and not summary["errors"] else "MISSES"
        where = f"{pick.replicas} x {pick.tp} x {pick.gpu}"
        print(f"{name:<44} {where:<28} {pick.ttft_p95_s:>8.3f}s {p95 or float('nan'):>8.3f}s "
              f"{load.ttft_slo_s:>5.2f}s  {verdict} ({summary['requests']} requests, {summary['errors']} errors, "
              f"{summary['output_tokens_per_s']:.0f} output tok/s)")


if __name__ == "__main__":
    main()
