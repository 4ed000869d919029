"""The engine pods a telemetry cycle reads, and reading one: which pods of our services are engines (and
on which port), and one bounded GET of a pod's `/metrics` through the API server's pod proxy, parsed.

`workers.telemetry` runs these for every pod of a cluster on its thread pool and does the rest of the cycle.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from django.conf import settings
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from apps.serving.names import (
    COMPONENT_LABEL,
    ENGINE_COMPONENTS,
    LWS_WORKER_INDEX_LABEL,
    MANAGED_SELECTOR,
    REVISION_LABEL,
    SERVICE_UID_LABEL,
    pod_role,
)
from apps.telemetry.exposition import NotAnEngineExposition, Snapshot, parse_snapshot
from apps.telemetry.models import CANARY_ROLE, STABLE_ROLE
from apps.telemetry.scrape import ACCEPT
from workers.kubeerrors import classify


@dataclass(frozen=True)
class EnginePod:
    """An engine pod worth scraping: whose it is, where its HTTP port is, and whether it is ready."""

    service_id: int
    namespace: str
    name: str
    role: str
    node: str
    port: int | None
    ready: bool
    revision: int | None = None  # a canary unit's pod: the revision it runs (stable pods carry none)

    @property
    def side(self) -> str:
        """During a canary rollout, which revision's series the pod's figures go to."""
        return CANARY_ROLE if self.revision else STABLE_ROLE


@dataclass
class PodResult:
    """One pod's fetch: its parsed snapshot and when it arrived, or why it failed."""

    pod: EnginePod
    snapshot: Snapshot | None = None
    error: str = ""
    fetched_at: float = 0.0


# --- Which pods -----------------------------------------------------------------------------------------


def http_port(pod: dict) -> int | None:
    containers = (pod.get("spec") or {}).get("containers") or []
    engine = next((c for c in containers if c.get("name") == "engine"), containers[0] if containers else None)
    ports = (engine or {}).get("ports") or []
    named = next((p for p in ports if p.get("name") == "http"), ports[0] if ports else None)
    return named.get("containerPort") if named else None


def is_ready(pod: dict) -> bool:
    status = pod.get("status") or {}
    conditions = status.get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return status.get("phase") == "Running" and ready and not (pod.get("metadata") or {}).get("deletionTimestamp")


def engine_pods(pods: list[dict], service_ids: dict[str, int]) -> list[EnginePod]:
    """The engine pods (engine, prefill, decode; LeaderWorkerSet leaders only) of known services."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        service_id = service_ids.get(labels.get(SERVICE_UID_LABEL, ""))
        if service_id is None or labels.get(COMPONENT_LABEL) not in ENGINE_COMPONENTS:
            continue
        if labels.get(LWS_WORKER_INDEX_LABEL, "0") != "0":
            continue  # LeaderWorkerSet workers hold shards; the leader serves the API and the metrics
        role = pod_role(labels)
        out.append(EnginePod(
            service_id=service_id, namespace=meta.get("namespace", ""), name=meta.get("name", ""), role=role,
            node=(pod.get("spec") or {}).get("nodeName") or "", port=http_port(pod), ready=is_ready(pod),
            revision=int(labels[REVISION_LABEL]) if str(labels.get(REVISION_LABEL, "")).isdigit() else None,
        ))
    return out


def list_managed_pods(core: k8s.CoreV1Api, timeout: float) -> list[dict]:
    """One list call per cluster: every pod we manage, read as plain JSON."""
    response = core.list_pod_for_all_namespaces(
        label_selector=MANAGED_SELECTOR, _preload_content=False, _request_timeout=(timeout, timeout * 2)
    )
    return json.loads(response.data).get("items") or []


# --- Reading one -----------------------------------------------------------------------------------------


class FetchTooBig(Exception):
    """The exposition outgrew TELEMETRY_MAX_EXPOSITION_BYTES."""


class FetchTooSlow(Exception):
    """The exposition did not arrive whole within its time."""


def read_bounded(response, max_bytes: int, deadline: float) -> bytes:
    """The body, read one socket read at a time, refused past `max_bytes` or the monotonic `deadline`. Each
    read is bounded by the read timeout; this bounds their sum (an engine dripping bytes never ends)."""
    parts, size = [], 0
    while True:
        chunk = response.read1(64 * 1024)
        if not chunk:
            return b"".join(parts)
        size += len(chunk)
        if size > max_bytes:
            raise FetchTooBig(f"exposition larger than {max_bytes} bytes")
        if time.monotonic() > deadline:
            raise FetchTooSlow(
                f"exposition not complete in time (TELEMETRY_SCRAPE_TIMEOUT_SECONDS="
                f"{settings.TELEMETRY_SCRAPE_TIMEOUT_SECONDS} seconds a pod, TELEMETRY_CYCLE_DEADLINE_SECONDS="
                f"{settings.TELEMETRY_CYCLE_DEADLINE_SECONDS} a cycle)")
        parts.append(chunk)


PROXY_PATH = "/api/v1/namespaces/{namespace}/pods/{name}/proxy/{path}"


def proxy_call(core: k8s.CoreV1Api, pod: EnginePod, method: str, path: str, timeout: float, body=None,
               accept: str = ACCEPT):
    """The response (any status, body unread) to `method` `path` on the pod's HTTP port through the API server's
    pod proxy, with `body` sent as JSON.

    The request `core.connect_get_namespaced_pod_proxy_with_path(..., _preload_content=False)` sends (the
    client's own URL, headers and auth, through its REST layer and connection pool), made one level lower to
    skip the generated method's per-call argument validation and wrapping: a tenth of the client's CPU per
    request, 2,000 times a cycle; and the generated POST takes no body.
    """
    api = core.api_client
    headers = {"Accept": accept, **({"Content-Type": "application/json"} if body is not None else {})}
    request = api.param_serialize(
        method=method, resource_path=PROXY_PATH,
        path_params={"name": f"{pod.name}:{pod.port}", "namespace": pod.namespace, "path": path},
        query_params=[], header_params=headers, body=body, post_params=[], files={},
        auth_settings=["BearerToken"], collection_formats={},
    )
    return api.call_api(*request, _request_timeout=(timeout, timeout))


def proxy_get(core: k8s.CoreV1Api, pod: EnginePod, path: str, timeout: float):
    """The unread response to GET `path` through the pod proxy; a non-2xx answer raised as ApiException."""
    response = proxy_call(core, pod, "GET", path, timeout)
    if not 200 <= response.status <= 299:
        response.read()
        raise ApiException.from_response(http_resp=response, body=None, data=None)
    return response.response


def scrape_pod(core: k8s.CoreV1Api, pod: EnginePod, timeout: float, deadline: float | None = None) -> PodResult:
    """GET the pod's /metrics through the API server's pod proxy and parse it; errors end up in the result.

    The fetch is bounded in time (`timeout`, and the cycle's monotonic `deadline`) and in bytes
    (TELEMETRY_MAX_EXPOSITION_BYTES), so one slow or huge engine costs its own pod, not the cluster's cycle.
    """
    result = PodResult(pod)
    own_deadline = time.monotonic() + timeout
    deadline = own_deadline if deadline is None else min(own_deadline, deadline)
    try:
        if time.monotonic() > deadline:
            raise FetchTooSlow(f"not fetched: the cycle ran past its {settings.TELEMETRY_CYCLE_DEADLINE_SECONDS} "
                               "seconds")
        response = proxy_get(core, pod, "metrics", timeout)
        try:
            body = read_bounded(response, settings.TELEMETRY_MAX_EXPOSITION_BYTES, deadline)
        finally:
            response.release_conn()
        text = body.decode("utf-8", errors="replace")
        result.fetched_at = time.time()
        result.snapshot = parse_snapshot(text, scraped_at=result.fetched_at)
    except NotAnEngineExposition as exc:
        result.error = f"not an engine exposition: {exc}"
    except FetchTooBig as exc:
        result.error = str(exc)
    except FetchTooSlow as exc:
        result.error = str(exc)
    except Exception as exc:  # any failure of one pod is that pod's error, never the cycle's
        result.error = classify(exc).message
    return result
