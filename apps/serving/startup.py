"""A service's replica start-ups: recorded from the phase Events its pods emit, modelled from the phases of
`capacity.startup`, and estimated for the node a new replica would land on (the autoscaler's cold start).

The reconciler records the phases (`record`) into the service's observation; the service page shows the modelled
cold and warm figures beside the recorded ones (`panel`); the autoscaler asks `cold_start_estimate`.
"""

from __future__ import annotations

from capacity import startup
from capacity.gpus import gpu_for
from enginevocab.labels import model_held_label

KEEP = 20  # recorded start-ups kept per service, newest first
CACHE_WORDS = {"none": "downloaded from the source", "cluster": "the cluster cache", "node": "the node's own copy"}


def _pod_of(event: dict) -> str:
    return (event.get("involvedObject") or {}).get("name", "")


def record(events: list[dict], previous: list[dict] | None) -> list[dict]:
    """Each pod's start-up phases read from its phase Events, merged into the previous records (newest first):
    [{pod, cache, phases: {phase: seconds}, total_s}]; a pod's record is complete once its init phase is in."""
    found: dict[str, dict] = {}
    for event in events:
        reason = event.get("reason")
        parsed = startup.parse_phase_message(event.get("message", "")) if reason in startup.PHASE_REASONS.values() \
            else None
        if parsed is None or startup.PHASE_REASONS.get(parsed[0]) != reason:
            continue
        phase, seconds, cache = parsed
        row = found.setdefault(_pod_of(event), {"pod": _pod_of(event), "cache": cache, "phases": {}})
        row["phases"][phase] = seconds
    out = [r for r in previous or [] if r["pod"] not in found]
    fresh = [{**row, "total_s": round(sum(row["phases"].values()), 1)} for row in found.values()]
    return (sorted(fresh, key=lambda r: r["pod"]) + out)[:KEEP]


def engine_pool(service):
    """The pool whose replicas serve (engine, decode, or a multi-node group's leader); the first pool otherwise."""
    pools = list(service.pools.all())
    return next((p for p in pools if p.role in ("engine", "decode", "leader")), pools[0] if pools else None)


def modelled(service, pool, cache: str, readers: int = 1) -> startup.Phases:
    """The phases of one replica of the pool reading its weights from `cache`."""
    from apps.serving.rendering.spec import model_spec

    weights = model_spec(service.model).weights_bytes / max(1, pool.nodes_per_replica)
    return startup.phases(gpu_for(pool.gpu_type), pool.gpus_per_replica // max(1, pool.nodes_per_replica) or 1,
                          weights, cache, engine=service.runtime.engine, readers=readers)


def landing_cache(service, pool, recorded: list[dict]) -> str:
    """Where a new replica of the pool would find its weights: the node-local copy when a node of its GPU with
    room for it holds the model (the scheduler prefers those nodes), else the cluster cache once a replica filled
    it, else nowhere yet. Never the node's copy on a cluster whose pods read none (node model volume "none")."""
    from apps.clusters.models import GpuNode

    if not service.cluster.reads_node_copies:
        return "cluster" if recorded else "none"
    gpu = gpu_for(pool.gpu_type)
    label = model_held_label(service.model.name)
    for node in GpuNode.objects.filter(cluster_id=service.cluster_id, gpu_product=gpu.product, ready=True):
        if (node.labels or {}).get(label) == "true" and node.allocatable - node.allocated >= pool.gpus_per_replica:
            return "node"
    return "cluster" if recorded else "none"


def _recorded(service) -> list[dict]:
    observation = getattr(service, "observation", None)
    return list(getattr(observation, "startups", None) or [])


def cold_start_estimate(service, pool) -> float | None:
    """Seconds a new replica of the pool would take on the node it would land on: the latest recorded start-up
    from that kind of cache, else the modelled one. None for a service with no recorded start-up (the autoscaler
    then keeps its measured scale-up time)."""
    recorded = _recorded(service)
    if not recorded:
        return None
    cache = landing_cache(service, pool, recorded)
    same = [r for r in recorded if r.get("cache") == cache and "init" in r.get("phases", {})]
    return same[0]["total_s"] if same else round(modelled(service, pool, cache).total_s, 1)


def _seconds(seconds: float) -> str:
    """Tenths of a second under a minute (a load phase takes a fraction of one), else minutes and seconds."""
    return f"{seconds:.1f} s" if seconds < 60 else startup.duration(seconds)


def panel(service) -> dict | None:
    """The service page's start-up figures: the modelled sentence (cold, warm, from the node's copy, or that the
    cluster keeps none: node model volume "none") and the recorded start-ups. None for a service without an engine
    pool."""
    pool = engine_pool(service)
    if pool is None:
        return None
    cold, warm, local = (modelled(service, pool, cache) for cache in ("none", "cluster", "node"))
    rows = [{**r, "cache_text": CACHE_WORDS.get(r.get("cache") or "", "unknown"),
             "phases_text": ", ".join(f"{name} {_seconds(r['phases'][name])}"  # in phase order (jsonb sorts keys)
                                      for name in startup.PHASE_REASONS if name in r["phases"]),
             "total_text": _seconds(r["total_s"])} for r in _recorded(service)]
    node_words = (f"; from a node holding the weights {startup.duration(local.total_s)} (read "
                  f"{startup.size(local.weights_bytes)} at {startup.rate(local.read_bytes_per_s)})"
                  if service.cluster.reads_node_copies else "; its cluster keeps no node-local copies")
    return {"sentence": startup.sentence(cold, warm) + node_words,
            "gpu": gpu_for(pool.gpu_type).short, "recorded": rows}
