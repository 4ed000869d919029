"""Cold start, measured on kubesim's model of start-up phases: how long a replica takes from a request at zero to
serving, by where its weights are; how long a 70B service takes from 1 to 4 Ready replicas with and without its
weights prefetched onto the nodes; and how many times a platform model used by three tenants is downloaded.

    .venv/bin/python bench/cold_start.py [--json]

The start-up figures are kubesim's own (capacity/startup.py, the phases kubesim's kubelet sleeps through): image on
the node; the weights downloaded from the source at 200 MB/s (none cached), read from the cluster cache at 2 GB/s
(4 GB/s shared by concurrent readers) or from the node's disk at 5 GB/s; loaded over each GPU's host link at 80 %;
then the engine's init (vLLM 20 s). The downloads are counted by running three tenants' first pods through kubesim's
cache bookkeeping (kubesim/cluster/weights.py) with the weights annotation the renderer writes. The sleep figures
come from bench/sleep_wake.py.

The last line with --json is one JSON object: activation_s {llama-8b-l4, llama-70b-4xh100: {none, cluster_cache,
node_cache, sleep}}, scale_1_to_4_s {prefetch, none}, source_downloads, gpu_hours {sleep, delete},
activation_p95_s {sleep, delete}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sleep_wake

from apps.serving.names import cluster_cache_key
from capacity.gpus import GPUS
from capacity.known import KNOWN_MODELS
from capacity.startup import phases
from enginevocab.labels import WEIGHTS_ANNOTATION
from kubesim.cluster.weights import FilledCaches

BF16 = 2
# (key, model, GPU, GPUs per replica)
CASES = (
    ("llama-8b-l4", "meta-llama/Llama-3.1-8B-Instruct", "l4-24gb", 1),
    ("llama-70b-4xh100", "meta-llama/Llama-3.1-70B-Instruct", "h100-sxm-80gb", 4),
)
CACHES = {"none": "none", "cluster_cache": "cluster", "node_cache": "node"}
SOURCE = "hf://meta-llama/Llama-3.1-8B-Instruct@main"


def weights_bytes(model: str) -> float:
    return KNOWN_MODELS[model].weights_bytes(BF16)


def activation() -> dict[str, dict[str, float]]:
    """Seconds from a request at zero to a Ready replica, by where the weights are."""
    out = {}
    for key, model, gpu, gpus in CASES:
        out[key] = {name: round(phases(GPUS[gpu], gpus, weights_bytes(model), cache).total_s, 1)
                    for name, cache in CACHES.items()}
    return out


def scale_1_to_4() -> dict[str, float]:
    """Seconds for 3 new 70B replicas to be Ready at once: on nodes holding a prefetched copy, each reads its own
    disk; without, all three read the (filled) cluster cache together and share its rate."""
    _, model, gpu, gpus = CASES[1]
    nbytes = weights_bytes(model)
    return {"prefetch": round(phases(GPUS[gpu], gpus, nbytes, "node").total_s, 1),
            "none": round(phases(GPUS[gpu], gpus, nbytes, "cluster", readers=3).total_s, 1)}


def source_downloads(platform_wide: bool, tenants: int = 3) -> int:
    """Downloads from the model's source when `tenants` tenants each start a first replica of the same model."""
    caches, node, downloads = FilledCaches(), {"metadata": {"labels": {}}}, 0
    for i in range(tenants):
        spec = SimpleNamespace(namespace=f"tenant-{i}", model=SimpleNamespace(
            name="llama-3-1-8b", source_uri=SOURCE, platform_wide=platform_wide))
        weights = {"model": spec.model.name, "cluster_cache": cluster_cache_key(spec)}
        pod = {"metadata": {"annotations": {WEIGHTS_ANNOTATION: json.dumps(weights)}}}
        if caches.cache_for(pod, node) == "none":
            downloads += 1
            caches.fill(pod)
    return downloads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="end with one JSON object of the figures")
    args = parser.parse_args()
    sleep = sleep_wake.figures()
    figures = activation()
    for key, _, _, _ in CASES:
        figures[key]["sleep"] = sleep["activation_s"].get(key)
    scale = scale_1_to_4()
    shared, per_tenant = source_downloads(True), source_downloads(False)
    for key, model, gpu, gpus in CASES:
        row = figures[key]
        print(f"{key} ({weights_bytes(model) / 1e9:.1f} GB on {gpus} x {GPUS[gpu].short}): no cache {row['none']} s, "
              f"cluster cache {row['cluster_cache']} s, node cache {row['node_cache']} s, sleep {row['sleep']} s")
    print(f"70B from 1 to 4 Ready replicas: {scale['prefetch']} s with prefetch, {scale['none']} s without")
    print(f"downloads from the source, one platform model used by 3 tenants: {shared} (a cache per tenant: "
          f"{per_tenant})")
    print(f"GPU-hours over a day, sleep against delete: {sleep['gpu_hours']}; activation p95: "
          f"{sleep['activation_p95_s']}")
    if args.json:
        print(json.dumps({"activation_s": figures, "scale_1_to_4_s": scale, "source_downloads": shared,
                          "gpu_hours": sleep["gpu_hours"], "activation_p95_s": sleep["activation_p95_s"]}))


if __name__ == "__main__":
    main()
