"""The engine pod template shared by every deployment mode (names and labels: `apps.serving.names`).

An engine pod: one init container per artifact to fetch (model, LoRA adapters) into the per-model cache
volume, skipped when the artifact is already there, then one that picks the node-local copy of the weights or the
cluster cache (`apps.serving.rendering.weights`); the engine container with the adapter's flags, GPU
limits, probes on the engine's endpoints and a start-up budget sized to the model; the GPU node
selector and toleration; and an annotation with a hash of the template so any change rolls the pods.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shlex
from dataclasses import dataclass, replace

from django.conf import settings

from apps.catalog import kvoffload
from apps.catalog.engines import EngineAdapter, LoraAdapter, MultiNode, get_adapter
from apps.serving import cpureal
from apps.serving.idle_spec import sleep_mode_args
from apps.serving.names import (
    HF_TOKEN_KEY,
    TEMPLATE_HASH_ANNOTATION,
    cache_claim_name,
    dns_label,
    labels,
    model_claim_name,
)
from apps.serving.rendering.localsource import is_local, local_path, local_volume
from apps.serving.rendering.loras import loaded_at_run_time
from apps.serving.rendering.spec import PoolSpec, ServiceSpec
from apps.serving.rendering.weights import (
    cached,
    select_container,
    share_mounts,
    warm_node_affinity,
    weights_annotations,
    weights_volumes,
)
from capacity import startup
from capacity.gpus import gpu_for
from capacity.parallel import effective_parallelism

MODELS_DIR = "/models"
SOURCE_DIR = "/model-source"
DRAFT_SOURCE_DIR = "/draft-source"
# The probes' deadlines budget the start-up phases of capacity.startup with room to spare: weights read at a
# quarter of the cluster cache's modelled rate and, on first use, downloaded at half the source's, then a few
# minutes for CUDA graphs and warm-up.
READ_BYTES_PER_SECOND = startup.CLUSTER_CACHE_BYTES_PER_S / 4
DOWNLOAD_BYTES_PER_SECOND = startup.SOURCE_BYTES_PER_S / 2
ENGINE_WARMUP_SECONDS = 300
STARTUP_PERIOD_SECONDS = 10


def metadata(spec: ServiceSpec, name: str, component: str, *, annotations: dict | None = None,
             app_name: str | None = None) -> dict:
    meta = {"name": name, "namespace": spec.namespace, "labels": labels(spec, component, app_name)}
    if annotations:
        meta["annotations"] = annotations
    return meta


def template_hash(template: dict) -> str:
    """A stable hash of a pod template (sorted JSON), short enough for an annotation value."""
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:16]


# Every pod: the container runtime's default seccomp profile; every container: no privilege escalation and
# no Linux capabilities (Pod Security "restricted" asks for both; "baseline" is enforced on the namespace).
POD_SECURITY_CONTEXT = {"seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY_CONTEXT = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
ENGINE_HOME = "/home/engine"


def harden(pod_spec: dict) -> dict:
    """The pod spec with the security contexts above merged in (what a container sets itself wins), and
    no ServiceAccount token unless the pod names its ServiceAccount: only the routers' discovery and the
    endpoint picker read the API, so an engine pod holds no credential worth stealing."""
    pod_spec.setdefault("automountServiceAccountToken", "serviceAccountName" in pod_spec)
    pod_spec["securityContext"] = {**POD_SECURITY_CONTEXT, **pod_spec.get("securityContext", {})}
    for container in [*pod_spec.get("initContainers", []), *pod_spec.get("containers", [])]:
        container["securityContext"] = {**CONTAINER_SECURITY_CONTEXT, **container.get("securityContext", {})}
    return pod_spec


def with_template_hash(template: dict) -> tuple[dict, str]:
    """The template, hardened (`harden`), with its own hash annotated; and the hash. Every rendered pod
    template goes through here, so no container escapes the security contexts."""
    harden(template["spec"])
    digest = template_hash(template)
    meta = template["metadata"]
    meta["annotations"] = {**meta.get("annotations", {}), TEMPLATE_HASH_ANNOTATION: digest}
    return template, digest


# -- model cache ------------------------------------------------------------------------------------

_PATH_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _pvc_source(uri: str) -> tuple[str, str]:
    claim, _, path = uri.removeprefix("pvc://").partition("/")
    return claim, path


def model_path(spec: ServiceSpec) -> str:
    """Where the engine reads the weights: on the source PVC, or in the cache under the source's own
    directory name (`/models/Llama-3.1-8B-Instruct`), which is also how engines and logs name it."""
    return _weights_path(spec.model, SOURCE_DIR)


def draft_path(spec: ServiceSpec) -> str:
    """Where the engine reads the draft model of speculative decoding: as `model_path`, beside the model's."""
    return _weights_path(spec.draft_model, DRAFT_SOURCE_DIR)


def _weights_path(model, source_dir: str) -> str:
    uri = model.source_uri
    if is_local(uri):
        return local_path(uri)
    if uri.startswith("pvc://"):
        _, path = _pvc_source(uri)
        return f"{source_dir}/{path}".rstrip("/")
    tail = uri.split("://", 1)[-1].split("@", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    return f"{MODELS_DIR}/{_PATH_UNSAFE.sub('-', tail) or dns_label(model.name)}"


def cluster_cache_path(model) -> str:
    """Where a cached model's weights lie inside its cluster cache volume: `<claim>/<source dir>` (what the model
    agent copies from)."""
    return f"{model_claim_name(model)}/{_weights_path(model, SOURCE_DIR).rsplit('/', 1)[-1]}"


def engine_settings(spec: ServiceSpec):
    """The settings the engine is given: a draft model's name replaced by its path in the pod. A name that is no
    catalog model the tenant may use is refused (ValueError): the engine never gets a tenant's free text."""
    name = spec.settings.speculative_model
    if name is None:
        return spec.settings
    if spec.draft_model is None:
        raise ValueError(f"speculative_model {name!r} is not a model of the catalog this tenant may use")
    return replace(spec.settings, speculative_model=draft_path(spec))


def adapter_path(spec: ServiceSpec, index: int) -> str:
    adapter = spec.adapters[index]
    if adapter.source_uri.startswith("pvc://"):
        _, path = _pvc_source(adapter.source_uri)
        return f"/adapter-source-{index}/{path}".rstrip("/")
    return f"{MODELS_DIR}/adapters/{dns_label(adapter.name)}"


def _draft_uris(spec: ServiceSpec) -> list[str]:
    return [spec.draft_model.source_uri] if spec.draft_model is not None else []


def needs_cache(spec: ServiceSpec) -> bool:
    uris = [spec.model.source_uri, *_draft_uris(spec),
            *(a.source_uri for a in spec.adapters if not loaded_at_run_time(spec, a))]
    return any(not uri.startswith("pvc://") and not is_local(uri) for uri in uris)


def _local_uris(spec: ServiceSpec) -> list[str]:
    return [u for u in (spec.model.source_uri, *_draft_uris(spec), *(a.source_uri for a in spec.adapters))
            if is_local(u)]


def cache_size_gib(spec: ServiceSpec) -> int:
    """Room for the weights plus 20% (tokenizer, configs, adapters, partial downloads)."""
    weights = spec.model.weights_bytes + (spec.draft_model.weights_bytes if spec.draft_model is not None else 0)
    return max(10, math.ceil(weights * 1.2 / 1024**3))


def _fetch_script(uri: str, dest: str) -> str:
    """POSIX sh that downloads `uri` into `dest` unless it is already complete.

    A lock directory keeps concurrent replicas from downloading the same files twice; a lock older
    than an hour is taken to belong to a pod that died and is removed.
    """
    if uri.startswith("hf://"):
        ref = uri.removeprefix("hf://")
        repo, _, revision = ref.partition("@")
        fetch = (f"hf download {shlex.quote(repo)} --revision {shlex.quote(revision or 'main')} "
                 f'--local-dir "$dest.partial"')
    elif uri.startswith("s3://"):
        fetch = f'aws s3 sync {shlex.quote(uri)} "$dest.partial"'
    else:
        raise ValueError(f"cannot download {uri!r}")
    return "\n".join([
        "set -eu",
        f"dest={shlex.quote(dest)}",
        'if [ -f "$dest/.complete" ]; then echo "cached: $dest"; exit 0; fi',
        'mkdir -p "$(dirname "$dest")"',
        'find "$(dirname "$dest")" -maxdepth 1 -name "$(basename "$dest").lock" -mmin +60 -exec rmdir {} +',
        'until mkdir "$dest.lock" 2>/dev/null; do',
        '  if [ -f "$dest/.complete" ]; then echo "cached: $dest"; exit 0; fi',
        "  sleep 5",
        "done",
        "trap 'rmdir \"$dest.lock\"' EXIT",
        'if [ -f "$dest/.complete" ]; then exit 0; fi',
        'rm -rf "$dest.partial"',
        fetch,
        'rm -rf "$dest"',
        'mv "$dest.partial" "$dest"',
        'touch "$dest/.complete"',
    ])


def hf_token_env(secret: str) -> dict:
    return {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": secret, "key": HF_TOKEN_KEY}}}


def _fetch_container(spec: ServiceSpec, name: str, uri: str, dest: str) -> dict:
    hf = uri.startswith("hf://")
    env = [{"name": "HF_HOME", "value": f"{MODELS_DIR}/.hf-home"}] if hf else []
    if hf and spec.model_token_secret:
        env.append(hf_token_env(spec.model_token_secret))
    container = {
        "name": name,
        "image": spec.image_ref if hf else settings.MODEL_FETCH_IMAGE,
        "command": ["sh", "-c", _fetch_script(uri, dest)],
        "volumeMounts": [{"name": "model-cache", "mountPath": MODELS_DIR}],
        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
    }
    if env:
        container["env"] = env
    return container


def init_containers(spec: ServiceSpec) -> list[dict]:
    """One fetch container per artifact not already on a PVC: the model first, then adapters."""
    out = []
    if not spec.model.source_uri.startswith("pvc://") and not is_local(spec.model.source_uri):
        out.append(_fetch_container(spec, "fetch-model", spec.model.source_uri, model_path(spec)))
    if spec.draft_model is not None and not spec.draft_model.source_uri.startswith("pvc://") \
            and not is_local(spec.draft_model.source_uri):
        out.append(_fetch_container(spec, "fetch-draft-model", spec.draft_model.source_uri, draft_path(spec)))
    for i, adapter in enumerate(spec.adapters):
        if not adapter.source_uri.startswith("pvc://") and not loaded_at_run_time(spec, adapter):
            name = f"fetch-adapter-{dns_label(adapter.name)}"[:63]
            out.append(_fetch_container(spec, name, adapter.source_uri, adapter_path(spec, i)))
    if cached(spec):
        out.append(select_container(spec, settings.MODEL_FETCH_IMAGE, model_path(spec).rsplit("/", 1)[-1]))
    return out


def shm_gib(gpus: int) -> int:
    """GiB of shared memory per pod: 8 per GPU. Tensor parallel workers exchange data through it; the KV-cache CPU
    tiers (vLLM's native and LMCache backends, SGLang's HiCache) are pinned memory in the workers, not shm."""
    return max(1, gpus) * 8


def volumes(spec: ServiceSpec, gpus: int) -> tuple[list[dict], list[dict]]:
    """Pod volumes and the engine container's mounts: model cache or source PVCs, and shared memory."""
    vols, mounts = [], []
    if cached(spec):
        vols, mounts = weights_volumes(spec)
    elif needs_cache(spec):
        vols.append({"name": "model-cache", "persistentVolumeClaim": {"claimName": cache_claim_name(spec)}})
        mounts.append({"name": "model-cache", "mountPath": MODELS_DIR, "readOnly": True})
    if spec.model.source_uri.startswith("pvc://"):
        claim, _ = _pvc_source(spec.model.source_uri)
        vols.append({"name": "model-source", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}})
        mounts.append({"name": "model-source", "mountPath": SOURCE_DIR, "readOnly": True})
    if spec.draft_model is not None and spec.draft_model.source_uri.startswith("pvc://"):
        claim, _ = _pvc_source(spec.draft_model.source_uri)
        vols.append({"name": "draft-source", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}})
        mounts.append({"name": "draft-source", "mountPath": DRAFT_SOURCE_DIR, "readOnly": True})
    for i, adapter in enumerate(spec.adapters):
        if adapter.source_uri.startswith("pvc://"):
            claim, _ = _pvc_source(adapter.source_uri)
            vols.append({"name": f"adapter-source-{i}",
                         "persistentVolumeClaim": {"claimName": claim, "readOnly": True}})
            mounts.append({"name": f"adapter-source-{i}", "mountPath": f"/adapter-source-{i}", "readOnly": True})
    if _local_uris(spec):
        volume, mount = local_volume()
        vols.append(volume)
        mounts.append(mount)
    # Tensor parallel workers exchange data through /dev/shm; the container default of 64 MiB is too small.
    vols.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_gib(gpus)}Gi"}})
    mounts.append({"name": "dshm", "mountPath": "/dev/shm"})  # noqa: S108 - a mount point, not a temp file
    return vols, mounts


# -- probes -----------------------------------------------------------------------------------------

def startup_budget_seconds(spec: ServiceSpec, pool: PoolSpec) -> int:
    """Seconds an engine may take to start: reading its share of the weights, twice over, plus warm-up."""
    share = spec.model.weights_bytes / max(1, pool.nodes_per_replica)
    return ENGINE_WARMUP_SECONDS + math.ceil(2 * share / READ_BYTES_PER_SECOND)


def progress_deadline_seconds(spec: ServiceSpec, pool: PoolSpec) -> int:
    """Rollout deadline: a first download of the weights plus the start-up budget (at least 600 s)."""
    download = math.ceil(spec.model.weights_bytes / DOWNLOAD_BYTES_PER_SECOND)
    return max(600, download + startup_budget_seconds(spec, pool))


def probes(adapter: EngineAdapter, spec: ServiceSpec, pool: PoolSpec) -> dict:
    budget = startup_budget_seconds(spec, pool)
    # SGLang's /health runs a one-token generation with a 20 s timeout; give it room.
    liveness_timeout = 30 if adapter.kind == "sglang" else 5
    return {
        "startupProbe": {
            "httpGet": {"path": adapter.startup_path, "port": "http"},
            "periodSeconds": STARTUP_PERIOD_SECONDS, "timeoutSeconds": 5,
            "failureThreshold": math.ceil(budget / STARTUP_PERIOD_SECONDS),
        },
        "readinessProbe": {
            "httpGet": {"path": adapter.readiness_path, "port": "http"},
            "periodSeconds": 5, "timeoutSeconds": 5, "failureThreshold": 3,
        },
        "livenessProbe": {
            "httpGet": {"path": adapter.health_path, "port": "http"},
            "periodSeconds": 15, "timeoutSeconds": liveness_timeout, "failureThreshold": 3,
        },
    }


# -- the engine pod ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class PodRole:
    """Which engine pod to build: the component label, P/D role and place in a multi-node group."""

    component: str = "engine"
    disaggregation: str | None = None  # "prefill" | "decode"
    multi_node: MultiNode | None = None
    extra_labels: tuple[tuple[str, str], ...] = ()


def served_name(spec: ServiceSpec) -> str:
    return spec.model.name


def engine_resources(spec: ServiceSpec, pool: PoolSpec) -> dict:
    """CPU, memory and GPUs of the engine container. With a KV-cache CPU tier the memory request adds the
    tier and its pinned-buffer overhead for every GPU (`kvoffload.pod_memory_gib`), and a memory limit is
    set: the tier is pinned, so the scheduler must place the pod on a node that has it. The limit also
    counts the memory-backed /dev/shm, whose pages are charged to the pod. On cpu-real nodes: one real engine's
    CPU and memory, no GPU (apps/serving/cpureal.py)."""
    if cpureal.on_cpu_real(spec.engine, spec.model.source_uri):
        return cpureal.resources()
    gpus = pool.gpus_per_replica
    resource = gpu_for(pool.gpu_type).resource
    memory = kvoffload.ENGINE_MEMORY_GIB_PER_GPU * gpus
    limits = {resource: str(gpus)}
    kv = spec.settings.kv_offload
    if kv is not None:
        memory += kvoffload.pod_memory_gib(kv, gpus)
        limits = {"memory": f"{memory + shm_gib(gpus)}Gi", **limits}
    return {"requests": {"cpu": str(2 * gpus), "memory": f"{memory}Gi", resource: str(gpus)}, "limits": limits}


def engine_container(spec: ServiceSpec, pool: PoolSpec, role: PodRole, mounts: list[dict]) -> dict:
    adapter = get_adapter(spec.engine)
    loras = [LoraAdapter(a.name, None if loaded_at_run_time(spec, a) else adapter_path(spec, i), a.rank)
             for i, a in enumerate(spec.adapters)]
    args = adapter.flags(
        engine_settings(spec), model_path=model_path(spec), served_name=served_name(spec), port=adapter.port,
        adapters=loras, role=role.disaggregation, default_args=spec.runtime_args, multi_node=role.multi_node,
        tag=spec.tag,
        parallelism=effective_parallelism(pool.gpus_per_replica, pool.nodes_per_replica,
                                          spec.settings.tensor_parallel_size, spec.settings.pipeline_parallel_size,
                                          engine=spec.engine),
    )
    sleep_args, sleep_env = sleep_mode_args(spec.autoscaling.when_idle, spec.engine)
    args += sleep_args
    ports = [{"name": "http", "containerPort": adapter.port, "protocol": "TCP"}]
    env: list[dict] = [{"name": name, "value": value} for name, value in sleep_env.items()]
    if any(lora.path is None for lora in loras):  # vLLM's load and unload endpoints exist only with this set
        env.append({"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"})
    if spec.model_token_secret and spec.engine == "vllm":
        # vLLM downloads a Hugging Face adapter itself when it is loaded at run time: a private one needs the
        # tenant's token. Whether or not an adapter is loaded now, so adding one changes no template.
        env.append(hf_token_env(spec.model_token_secret))
    if role.disaggregation == "prefill" and spec.engine == "sglang":
        ports.append({"name": "bootstrap", "containerPort": adapter.bootstrap_port, "protocol": "TCP"})
    if role.disaggregation and spec.engine == "vllm":
        # NIXL's side channel tells the peer where to read the KV blocks from (engines.md §3).
        ports.append({"name": "nixl", "containerPort": 5600, "protocol": "TCP"})
        env += [
            {"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": "5600"},
        ]
    if role.multi_node is not None:
        if role.multi_node.is_leader:
            ports.append({"name": "dist", "containerPort": role.multi_node.leader_port, "protocol": "TCP"})
        else:
            ports = []  # workers (other ranks) serve no HTTP and listen on no rendezvous port
    container = {
        "name": "engine",
        "image": spec.image_ref,
        "command": list(adapter.command),
        "args": args,
        **({"ports": ports} if ports else {}),
        "resources": engine_resources(spec, pool),
        "volumeMounts": mounts,
    }
    if adapter.non_root_uid is not None:
        # Non-root: the engine's caches go to an emptyDir home; the weights are only read.
        env.append({"name": "HOME", "value": ENGINE_HOME})
        container["volumeMounts"] = [*mounts, {"name": "home", "mountPath": ENGINE_HOME}]
        container["securityContext"] = {"runAsNonRoot": True, "runAsUser": adapter.non_root_uid,
                                         "runAsGroup": adapter.non_root_uid}
    if env:
        container["env"] = env
    # Multi-node workers other than the leader do not serve HTTP; the leader's probes speak for the group.
    if role.multi_node is None or role.multi_node.is_leader:
        container.update(probes(adapter, spec, pool))
    return container


def engine_pod_template(spec: ServiceSpec, pool: PoolSpec, role: PodRole) -> dict:
    """The pod template of one engine pool (or one side of a multi-node group), hash annotated."""
    gpu = gpu_for(pool.gpu_type)
    vols, mounts = volumes(spec, pool.gpus_per_replica)
    annotations = weights_annotations(spec)
    if role.disaggregation == "prefill" and spec.engine == "sglang":
        # The SGLang router reads the prefill bootstrap port from this annotation.
        annotations["sglang.ai/bootstrap-port"] = str(get_adapter("sglang").bootstrap_port)
    pod_labels = labels(spec, role.component, **dict(role.extra_labels))
    pod_spec: dict = {
        **(cpureal.placement() if cpureal.on_cpu_real(spec.engine, spec.model.source_uri) else {
            "nodeSelector": {gpu.product_label: gpu.product},
            "tolerations": [{"key": gpu.resource, "operator": "Exists", "effect": "NoSchedule"}]}),
        "terminationGracePeriodSeconds": 60,
        **({"affinity": affinity} if (affinity := warm_node_affinity(spec)) else {}),
    }
    if spec.kueue is not None and spec.kueue.running is not None:
        pod_spec["priorityClassName"] = spec.kueue.running.name  # the pod PriorityClass of rendering/kueue.py
    inits = init_containers(spec)
    if inits:
        pod_spec["initContainers"] = inits
    pod_spec["containers"] = [engine_container(spec, pool, role, mounts)]
    if get_adapter(spec.engine).non_root_uid is not None:
        vols = [*vols, {"name": "home", "emptyDir": {}}]
    pod_spec["volumes"] = vols
    share_mounts(spec, pod_spec)
    meta = {"labels": pod_labels}
    if annotations:
        meta["annotations"] = annotations
    template, _ = with_template_hash({"metadata": meta, "spec": pod_spec})
    return template
