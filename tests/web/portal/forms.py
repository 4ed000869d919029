"""Form data as a browser would post it to the portal's service form."""

from __future__ import annotations


def service_post(*, name="new-chat", cluster="sim", model, runtime, mode="standard", version=None, base="",
                 pools=None, **fields) -> dict:
    data = {
        "name": name, "cluster": cluster, "model": model.pk, "runtime": runtime.pk, "deployment_mode": mode,
        "routing_policy": "round_robin", "tensor_parallel_size": 1, "pipeline_parallel_size": 1,
        "autoscaler": "none", "version": version or "", "base": base,
    }
    for role, values in (pools or {"engine": {}}).items():
        pool = {"role": role, "replicas": 1, "min_replicas": 1, "max_replicas": 2, "gpu_type": "h100-sxm-80gb",
                "gpus_per_replica": 1, "nodes_per_replica": 1, **values}
        data.update({f"pool-{role}-{k}": v for k, v in pool.items()})
    data.update(fields)
    return {k: v for k, v in data.items() if v is not None}
