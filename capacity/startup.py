"""A replica's start-up as phases: image pull, weight download, weight read, load over the host link, engine init.

One definition read by kubesim (which sleeps through the phases and emits an event for each), the renderer (which
says where a pod reads its weights), the service page (which states the cold and warm figures) and the benches.
Where a pod reads its weights from:
- `none`: nothing cached yet; the weights are downloaded from the model's source into the cluster cache, then read;
- `cluster`: the cluster cache, a ReadWriteMany volume over the network;
- `node`: a node-local copy the model agent made on the node's own disk.

The defaults below are stated once; kubesim's `kubesim.io/<name>` pod annotations override them per pod.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from capacity.gpus import HOST_LINK_FRACTION, Gpu

# A model's source (Hugging Face, S3) as a cluster sees it: 200 MB/s for one download.
SOURCE_BYTES_PER_S = 200e6
# The cluster cache, a ReadWriteMany network volume: 2 GB/s for one reader (16 Gbit/s), 4 GB/s shared by all of them.
CLUSTER_CACHE_BYTES_PER_S = 2e9
CLUSTER_CACHE_AGGREGATE_BYTES_PER_S = 4e9
# A node's local NVMe disk: 5 GB/s of sequential reads (a PCIe 4.0 x4 drive).
NODE_DISK_BYTES_PER_S = 5e9
# A node-local disk for model copies, when the node states none: 2 TB.
NODE_DISK_BYTES = 2 * 10**12
# An engine image (vLLM's CUDA image) and the registry's rate for a node pulling it the first time.
IMAGE_BYTES = 8 * 10**9
REGISTRY_BYTES_PER_S = 250e6
# Engine init after the weights are on the GPUs: compile, CUDA graphs, profiling run (vLLM's is the longer).
ENGINE_INIT_S = {"vllm": 20.0, "sglang": 15.0}

CACHES = ("none", "cluster", "node")


@dataclass(frozen=True)
class Phases:
    """Seconds of each phase of one replica's start-up, with the bytes and rates that gave them."""

    cache: str  # where the weights were read from: "none" (downloaded first), "cluster" or "node"
    weights_bytes: float  # the pod's weights (its share of a model split over several pods)
    pull_s: float
    download_s: float
    read_s: float
    read_bytes_per_s: float
    load_s: float
    init_s: float

    @property
    def total_s(self) -> float:
        return self.pull_s + self.download_s + self.read_s + self.load_s + self.init_s

    def as_list(self) -> list[tuple[str, float]]:
        """(phase, seconds) in order, the phases that take no time left out."""
        named = [("pull", self.pull_s), ("download", self.download_s), ("read", self.read_s),
                 ("load", self.load_s), ("init", self.init_s)]
        return [(name, seconds) for name, seconds in named if seconds > 0]


def read_rate(cache: str, readers: int = 1) -> float:
    """Bytes/s one of `readers` pods reading at once gets from `cache` ("none" reads the cluster cache once filled):
    each node reads its own disk; readers of the cluster cache share its aggregate rate."""
    if cache == "node":
        return NODE_DISK_BYTES_PER_S
    if cache not in CACHES:
        raise ValueError(f"unknown weights cache {cache!r}; known: {', '.join(CACHES)}")
    return min(CLUSTER_CACHE_BYTES_PER_S, CLUSTER_CACHE_AGGREGATE_BYTES_PER_S / max(1, readers))


def phases(gpu: Gpu, ranks: int, weights_bytes: float, cache: str, *, engine: str = "vllm",
           image_cached: bool = True, readers: int = 1, init_s: float | None = None,
           source_bytes_per_s: float = SOURCE_BYTES_PER_S, host_link_fraction: float = HOST_LINK_FRACTION,
           read_bytes_per_s: float | None = None) -> Phases:
    """The phases of a pod holding `weights_bytes` over `ranks` GPUs of `gpu` that reads from `cache`.

    The pod downloads the whole of its weights when nothing is cached, reads them from the cache at `read_rate`,
    and each rank loads its share over its own host link at `host_link_fraction` of the link's rate.
    """
    rate = read_bytes_per_s or read_rate(cache, readers)
    return Phases(
        cache=cache,
        weights_bytes=weights_bytes,
        pull_s=0.0 if image_cached else IMAGE_BYTES / REGISTRY_BYTES_PER_S,
        download_s=weights_bytes / source_bytes_per_s if cache == "none" else 0.0,
        read_s=weights_bytes / rate,
        read_bytes_per_s=rate,
        load_s=weights_bytes / max(1, ranks) / (gpu.host_link * host_link_fraction),
        init_s=ENGINE_INIT_S.get(engine, ENGINE_INIT_S["vllm"]) if init_s is None else init_s,
    )


def cache_on_node(node_labels: dict[str, str], model_label: str, cluster_cache_filled: bool) -> str:
    """Which cache a pod of the model reads on a node: its local copy, else the cluster cache, else none yet."""
    if node_labels.get(model_label) == "true":
        return "node"
    return "cluster" if cluster_cache_filled else "none"


def duration(seconds: float) -> str:
    """`6 m 40 s`, `32 s`, `1 h 5 m`: seconds for people, rounded to the second."""
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} m"
    return f"{minutes} m {secs} s" if minutes else f"{secs} s"


def size(nbytes: float) -> str:
    """Decimal units, as disks and downloads are sold: `16 GB`, `141 GB`, `500 MB`."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if nbytes >= scale:
            value = nbytes / scale
            whole = value >= 10 or abs(value - round(value)) < 0.05
            return f"{value:.0f} {unit}" if whole else f"{value:.1f} {unit}"
    return f"{nbytes:.0f} B"


def rate(bytes_per_s: float) -> str:
    return size(bytes_per_s) + "/s"


def sentence(cold: Phases, warm: Phases) -> str:
    """`cold 1 m 50 s (download 16 GB at 200 MB/s), warm 29 s (read 16 GB at 2 GB/s, init 20 s)`."""
    return (f"cold {duration(cold.total_s)} (download {size(cold.weights_bytes)} at "
            f"{rate(cold.weights_bytes / cold.download_s if cold.download_s else SOURCE_BYTES_PER_S)}), "
            f"warm {duration(warm.total_s)} (read {size(warm.weights_bytes)} at {rate(warm.read_bytes_per_s)}, "
            f"init {duration(warm.init_s)})")


# The Event reason kubesim records as each phase ends (the image pull is the kubelet's own `Pulled`), and the
# message telemetry reads the phase's seconds back from: `<phase> 16 GB at 2 GB/s in 8.0 s` (init: `init in 20.0 s`).
PHASE_REASONS = {"download": "WeightsDownloaded", "read": "WeightsRead", "load": "WeightsLoaded",
                 "init": "EngineInitialized"}
_MESSAGE = re.compile(r"^(?P<phase>[a-z]+)(?: (?P<what>.+?))? in (?P<seconds>[0-9.]+) s(?: from (?P<cache>[a-z]+))?$")


def phase_message(p: Phases, phase: str) -> str:
    """The Event message of one phase of `p`."""
    seconds = dict(p.as_list()).get(phase, 0.0)
    rates = {"download": p.weights_bytes / p.download_s if p.download_s else 0.0, "read": p.read_bytes_per_s,
             "load": p.weights_bytes / p.load_s if p.load_s else 0.0}
    what = f" {size(p.weights_bytes)} at {rate(rates[phase])}" if phase in rates else ""
    return f"{phase}{what} in {seconds:.1f} s from {p.cache}"


def parse_phase_message(message: str) -> tuple[str, float, str | None] | None:
    """(phase, seconds, cache) of a `phase_message`; None for any other text."""
    match = _MESSAGE.match(message.strip())
    if match is None or match["phase"] not in PHASE_REASONS:
        return None
    return match["phase"], float(match["seconds"]), match["cache"]
