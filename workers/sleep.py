"""Putting an idle pool's engines to sleep (vLLM's sleep mode, SGLang's memory release) through the API server's
pod proxy.

The autoscaler decides (apps/autoscaling/sleeping.py) and enqueues `AUTOSCALE_SLEEP_POOL`; this posts
`/sleep?level=N` to every ready vLLM engine pod of the pool, or `/release_memory_occupation {}` to SGLang's (level 1:
its weights kept in host memory by the CPU backup the service renders). The pods stay (and keep their GPUs); the
gateway wakes them at the next request (gateway/wake.py).
"""

from __future__ import annotations

import json
import logging

from django.utils import timezone
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from apps.gateway.models import Upstream
from apps.serving.models import InferenceService
from apps.serving.names import SERVICE_UID_LABEL, tenant_namespace
from enginevocab import sglang as sglang_vocab
from enginevocab import vllm as vllm_vocab
from workers.enginepods import PROXY_PATH, EnginePod, engine_pods
from workers.kube import kube_for

log = logging.getLogger(__name__)
TIMEOUT_S = 30.0  # a sleep offloads the weights before it answers (tens of GB over PCIe: seconds)


def proxy_post(core: k8s.CoreV1Api, pod: EnginePod, path: str, query: list[tuple[str, str]],
               timeout: float = TIMEOUT_S, body: dict | None = None) -> bytes:
    """POST `path?query` (with a JSON `body`, if any) on the pod's HTTP port through the API server's pod proxy;
    the body of a 2xx answer."""
    api = core.api_client
    request = api.param_serialize(
        method="POST", resource_path=PROXY_PATH,
        path_params={"name": f"{pod.name}:{pod.port}", "namespace": pod.namespace, "path": path.lstrip("/")},
        query_params=query, header_params={"Accept": "application/json"} | (
            {"Content-Type": "application/json"} if body is not None else {}),
        body=body, post_params=[], files={},
        auth_settings=["BearerToken"], collection_formats={},
    )
    response = api.call_api(*request, _request_timeout=(timeout, timeout))
    body = response.read()
    if not 200 <= response.status <= 299:
        raise ApiException(status=response.status, reason=body.decode(errors="replace")[:300])
    return body


def sleep_pods(core: k8s.CoreV1Api, pods: list[EnginePod], level: int, engine: str = "vllm") -> dict[str, str]:
    """Put each ready pod of `engine` to sleep at `level`; pod name → "sleeping" or why not."""
    out = {}
    for pod in pods:
        if not pod.ready or pod.port is None:
            out[pod.name] = "not ready"
            continue
        try:
            if engine == "sglang":
                proxy_post(core, pod, sglang_vocab.RELEASE_MEMORY_PATH, [], body={})
            else:
                proxy_post(core, pod, vllm_vocab.SLEEP_PATH, [("level", str(level))])
            out[pod.name] = "sleeping"
        except (ApiException, OSError) as exc:
            out[pod.name] = f"sleep failed: {getattr(exc, 'reason', exc)}"
    return out


def sleep_pool(service_id: int, role: str, level: int) -> dict[str, str]:
    """Put the engines of one pool of a service to sleep (nothing when the service is gone)."""
    service = InferenceService.objects.select_related("cluster", "tenant", "runtime").filter(pk=service_id).first()
    if service is None:
        return {}
    core = kube_for(service.cluster).core
    listed = core.list_namespaced_pod(tenant_namespace(service.tenant.slug), _preload_content=False,
                                      label_selector=f"{SERVICE_UID_LABEL}={service.uid}", _request_timeout=TIMEOUT_S)
    pods = [p for p in engine_pods(json.loads(listed.data).get("items") or [], {str(service.uid): service.pk})
            if p.role == role]
    result = sleep_pods(core, pods, level, service.runtime.engine)
    if "sleeping" in result.values():
        # The snapshot tells the gateway to wake these engines at the next request (gateway/wake.py).
        Upstream.objects.filter(service_id=service_id).update(sleep_level=level, slept_at=timezone.now())
    log.info("sleep %s/%s at level %d: %s", service_id, role, level, result)
    return result

