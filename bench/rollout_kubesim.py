"""The 2× slower canary in kubesim, for bench/rollout.py's `bad_canary`.

A kubesim cluster runs in-process with a slow-engine fault on the canary's pods only (every step takes twice as
long: `engine_faults`, selected by the revision label). Three Deployments of one vLLM engine: the stable revision
(2 replicas), the canary revision (labelled with its revision, ⌈2 × 5 %⌉ = 1 replica, as
apps/rollouts/units.py sizes it) and a production-stack router over both, its pod annotated with the 5 % step's
weight. A load of chat-like completions (prompt lengths log-normal around 600 tokens, 4 tokens out, streamed) goes
straight to the router pod, a few at a time; each request's TTFT and mean inter-token latency
are measured at the client, and the router's response names the pod that served it, so each request is a canary
or a stable sample, with the requests ahead of it on its pod (sent there before it, no first token yet: counted
from the client's times as the controller counts them from the gateway's rows). Every `WINDOW_REQUESTS` requests
make one analysis window, judged by the same
`analyse` and `decide` as the rollout controller (20 % tolerance, at least 100 requests a side; an inconclusive
window extends the step and its samples count with the next). The run stops at the first decision that is not
an extension.

Figures: whether it was rolled back, the windows it took, and the canary's share of all requests sent.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import sys
import time
from dataclasses import replace

import aiohttp
from kubernetes import client

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run as `python bench/...py`

from apps.rollouts.analysis import Action, Sample, StepState, Thresholds, analyse, decide, requests_ahead
from enginevocab.labels import CANARY_WEIGHTS_ANNOTATION, REVISION_LABEL, canary_weights_value
from kubesim.apiserver.server import Server
from kubesim.cluster.assembly import Cluster, ClusterConfig
from kubesim.cluster.faults import FaultConfig
from kubesim.engines.router import BACKEND_HEADER

NS = "bench"
REVISION, WEIGHT = 2, 5
WINDOW_REQUESTS = 2_100  # ⌊2,100 × 5 %⌋ = 105 canary requests a window: above the 100 the analysis needs
MAX_WINDOWS = 4
# Two at a time: the canary's one pod gets 5 % of the requests while the stable pods share the rest, so with more
# in flight the stable pods would queue and batch while the canary idles, and its TTFT would hide its slowness.
CONCURRENCY = 2
# The engines run on the wall clock (the same for both revisions).
TIME_SCALE = "1"
THRESHOLDS = Thresholds(tolerance=0.2, min_requests=100)
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _deployment(name: str, replicas: int, labels: dict, container: dict, annotations: dict) -> dict:
    pod_labels = {"app": name, **labels}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": pod_labels, "annotations": annotations},
                                  "spec": {"containers": [container], "tolerations": [GPU_TOLERATION]}}}}


def _engine(name: str, replicas: int, labels: dict) -> dict:
    container = {"name": "engine", "image": "vllm/vllm-openai:v0.33.0",
                 "args": ["meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192"],
                 "ports": [{"containerPort": 8000, "name": "http"}], "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    return _deployment(name, replicas, {"tier": "chat", **labels}, container, {"kubesim.io/time-scale": TIME_SCALE})


def _router() -> dict:
    container = {"name": "router", "image": "lmcache/lmstack-router:latest", "command": ["vllm-router"],
                 "args": ["--host", "0.0.0.0", "--port", "8000", "--service-discovery", "k8s", "--k8s-namespace", NS,
                          "--k8s-port", "8000", "--k8s-label-selector", "tier=chat", "--routing-logic", "roundrobin"],
                 "ports": [{"containerPort": 8000, "name": "http"}]}
    body = _deployment("router", 1, {}, container, {CANARY_WEIGHTS_ANNOTATION: canary_weights_value(REVISION, WEIGHT)})
    body["spec"]["template"]["spec"].pop("tolerations")
    return body


def _prompt(rng: random.Random) -> str:
    tokens = int(min(max(rng.lognormvariate(math.log(600), 0.9), 16), 4000))
    return " ".join(rng.choice(("rollout", "canary", "token", "latency", "cache", "prefill")) for _ in range(tokens))


async def _one(session: aiohttp.ClientSession, url: str, prompt: str) -> tuple[str, Sample, float, float]:
    """(pod, sample, sent, first token or end) of one streamed request, times on the client's clock."""
    body = {"model": "meta-llama/Llama-3.1-8B-Instruct", "prompt": prompt, "max_tokens": 4, "stream": True}
    started = time.perf_counter()
    times = []
    async with session.post(url, json=body) as response:
        pod = response.headers.get(BACKEND_HEADER, "")
        if response.status >= 500:
            await response.read()
            return (pod, Sample(prompt_tokens=len(prompt.split()), ttft_s=None, error=True), started,
                    time.perf_counter())
        async for line in response.content:
            if line.startswith(b"data: ") and not line.startswith(b"data: [DONE]"):
                times.append(time.perf_counter() - started)
    ttft = times[0] if times else None
    itl = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None
    sample = Sample(prompt_tokens=len(prompt.split()), ttft_s=ttft, itl_s=itl, error=ttft is None)
    return pod, sample, started, started + (ttft if ttft is not None else time.perf_counter() - started)


async def _window(url: str, rng: random.Random) -> tuple[list[Sample], list[Sample], int]:
    """One window's (canary, stable) samples, each with the requests ahead of it on its pod when it was sent (as the
    controller counts them from the gateway's rows)."""
    prompts = [_prompt(rng) for _ in range(WINDOW_REQUESTS)]
    done: list[tuple[str, Sample, float, float]] = []
    queue: asyncio.Queue = asyncio.Queue()
    for prompt in prompts:
        queue.put_nowait(prompt)

    async def worker(session):
        while not queue.empty():
            done.append(await _one(session, url, queue.get_nowait()))

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        await asyncio.gather(*(worker(session) for _ in range(CONCURRENCY)))
    loads = requests_ahead([(pod, start, end) for pod, _, start, end in done])
    canary: list[Sample] = []
    stable: list[Sample] = []
    for (pod, sample, _, _), load in zip(done, loads, strict=True):
        (canary if pod.startswith("canary-") else stable).append(replace(sample, ahead=load))
    return canary, stable, len(prompts)


def run(seed: int = 1) -> dict:
    """One rollout's 5 % step in kubesim with a 2× slower canary: {rolled_back, windows, canary_request_share}."""
    faults = FaultConfig(engine_faults=[{"selector": f"{REVISION_LABEL}={REVISION}", "slowdown": 2}])
    server = Server(port=0, seed=seed)
    cluster = Cluster(server, ClusterConfig(nodes="h100-sxm-80gb:1x8", fast_start=True, seed=seed, faults=faults))
    cluster.install()
    server.start_in_thread()
    try:
        deadline = time.monotonic() + 30
        while (cluster.ready is None or not cluster.ready.is_set()) and time.monotonic() < deadline:
            time.sleep(0.05)
        configuration = client.Configuration()
        configuration.host = server.url
        api = client.ApiClient(configuration)
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        core.create_namespace({"metadata": {"name": NS}})
        for body in (_engine("stable", 2, {}), _engine("canary", 1, {REVISION_LABEL: str(REVISION)}), _router()):
            apps.create_namespaced_deployment(NS, body)
        core.create_namespaced_service(NS, {"metadata": {"name": "router"}, "spec": {
            "selector": {"app": "router"}, "ports": [{"port": 8000, "targetPort": 8000}]}})
        wanted = {"stable": 2, "canary": 1, "router": 1}
        while any((apps.read_namespaced_deployment(n, NS).status.ready_replicas or 0) < r for n, r in wanted.items()):
            if time.monotonic() > deadline + 60:
                raise RuntimeError("the bench's Deployments did not become ready in 90 s")
            time.sleep(0.2)
        # Straight to the router pod's port, as a client inside the cluster would reach its Service.
        (router,) = cluster.view.ready_endpoints(NS, "app=router", 8000)
        url = f"{router.base_url}/v1/completions"
        rng = random.Random(seed)
        canary: list[Sample] = []
        stable: list[Sample] = []
        sent = windows = 0
        action = Action.EXTEND
        while action == Action.EXTEND and windows < MAX_WINDOWS:
            more_canary, more_stable, count = asyncio.run(_window(url, rng))
            canary += more_canary
            stable += more_stable
            sent += count
            windows += 1
            result = analyse(canary, stable, thresholds=THRESHOLDS)
            action = decide(result.verdict, StepState(last_step=False, inconclusive_count=windows - 1,
                                                      max_extensions=MAX_WINDOWS - 1))
            print(f"  kubesim window {windows}: {len(canary)} canary / {len(stable)} stable requests: "
                  f"{result.verdict} → {action}: {result.reason}")
            ttft = next((m for m in result.metrics if m.name == "TTFT p95"), None)
            if ttft is not None:
                print(f"    TTFT p95 {ttft.canary:.3f} s vs {ttft.stable:.3f} s (×{ttft.canary / ttft.stable:.2f}), "
                      f"lower bound {ttft.canary_lower:.3f} s against {ttft.allowed:.3f} s allowed")
                # The same window over every load (as judged before the load buckets), for comparison.
                alone = analyse(canary, stable, thresholds=replace(THRESHOLDS, load_buckets=()))
                over_all = next((m for m in alone.metrics if m.name == "TTFT p95"), None)
                if over_all is not None:
                    print(f"    over every load: ×{over_all.canary / over_all.stable:.2f}, {alone.verdict}")
                for b in ttft.detail["buckets"]:
                    print(f"      {b['bucket']}, {b['ahead'] or 'any load'}: {b['canary'] * 1000:.0f} ms vs "
                          f"{b['stable'] * 1000:.0f} ms ({b['canary_requests']} and {b['stable_requests']})")
        api.close()
        return {"rolled_back": action == Action.ROLL_BACK, "windows": windows,
                "canary_request_share": round(len(canary) / sent, 4)}
    finally:
        server.stop_in_thread()


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seed", type=int, nargs="?", default=1, help="of the load (default 1)")
    print(json.dumps(run(parser.parse_args().seed)))
