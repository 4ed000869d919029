"""The API server's pod and service proxies, and `kubectl logs`.

`/api/v1/namespaces/{ns}/pods/{name}[:{port}]/proxy/{path}` and `.../services/{name}[:{port}]/proxy/{path}`
forward any method, headers, query and body to the workload's loopback port and stream the response
back chunk by chunk (server-sent events arrive as the workload writes them).

Both enforce the NetworkPolicies of the target's namespace through the pod network the cluster wires in
(`kubesim.apiserver.kubelets.PodNetwork`): a request from a pod (the network's source header) or from the
API server itself reaches only the pods those policies admit.

The service proxy picks a ready endpoint with a routing policy: round robin unless the Service carries
the annotation `kubesim.io/routing-policy: <name>` naming one of the policies `Proxies` was built with
(the cluster assembly passes the engines' policies); `fn(request: ProxyRequest, endpoints: list[Endpoint])`
returns the Endpoint to use (or None for round robin), and may be a coroutine function.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from kubesim.workload import Endpoint, relay

from .errors import ApiError
from .kubelets import Kubelets, PodNetwork

log = logging.getLogger(__name__)

ROUTING_ANNOTATION = "kubesim.io/routing-policy"
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "authorization",
}


@dataclass
class ProxyRequest:
    """What a routing policy sees of a request going through the service proxy."""

    method: str
    path: str  # the path after /proxy, starting with "/"
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    namespace: str
    service: dict = field(default_factory=dict)  # the Service object (annotations carry policy settings)


RoutingPolicy = Callable[[ProxyRequest, list[Endpoint]], "Endpoint | Awaitable[Endpoint | None] | None"]


def parse_target(target: str) -> tuple[str, str | None]:
    """`name`, `name:port` or `scheme:name:port` -> (name, port or None)."""
    parts = target.split(":")
    if len(parts) == 3:
        return parts[1], parts[2] or None
    if len(parts) == 2:
        return parts[0], parts[1] or None
    return target, None


class Proxies:
    """The pod proxy, the service proxy and the log endpoint, over the kubelets and pod network wired in."""

    def __init__(self, store, kubelets: Kubelets, network: PodNetwork,
                 policies: Mapping[str, RoutingPolicy] | None = None):
        self.store = store
        self.kubelets = kubelets
        self.network = network
        # who is calling is the proxy's business, not the workload's
        self._hop_by_hop = _HOP_BY_HOP | {network.source_header.lower()}
        self._session: aiohttp.ClientSession | None = None
        self._round_robin: dict[tuple[str, str], itertools.count] = {}
        # Services annotated `kubesim.io/routing-policy: <name>` route through policies[name].
        self.policies: dict[str, RoutingPolicy] = dict(policies or {})

    def routing_policy(self, name: str | None) -> RoutingPolicy | None:
        """The policy a Service's routing annotation names, or None (round robin)."""
        return self.policies.get(name) if name else None

    def routes(self) -> list[tuple[str, str, Callable]]:
        base = "/api/v1/namespaces/{namespace}"
        return [
            ("*", base + "/pods/{target}/proxy{path:.*}", self.pod_proxy),
            ("*", base + "/services/{target}/proxy{path:.*}", self.service_proxy),
            ("GET", base + "/pods/{name}/log", self.logs),
        ]

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=0, force_close=False)
            self._session = aiohttp.ClientSession(
                connector=connector, auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None, sock_connect=5)
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    # --- pods -----------------------------------------------------------------------------------------

    async def pod_proxy(self, request: web.Request) -> web.StreamResponse:
        namespace = request.match_info["namespace"]
        name, port = parse_target(request.match_info["target"])
        pod = self.store.get("v1/pods", namespace, name)
        if not (pod.get("spec") or {}).get("nodeName"):
            raise ApiError.bad_request(f"pod {name} does not have a host assigned")
        if not self.network.admits(pod, self.network.source(request.headers.get(self.network.source_header)), port):
            raise self.network.refused(pod, port)
        local = self.kubelets.pod_port(namespace, name, port)
        if local is None:
            address = f"{(pod.get('status') or {}).get('podIP') or name}:{port or 80}"
            raise ApiError(
                503,
                "ServiceUnavailable",
                f"error trying to reach service: dial tcp {address}: connect: connection refused",
            )
        return await self.forward(request, f"http://127.0.0.1:{local}")

    # --- services -------------------------------------------------------------------------------------

    def _service_port(self, service: dict, port: str | None) -> dict:
        ports = (service.get("spec") or {}).get("ports") or []
        if port is None:
            if ports:
                return ports[0]
        else:
            for candidate in ports:
                if port in (str(candidate.get("port")), candidate.get("name")):
                    return candidate
        name = service["metadata"]["name"]
        raise ApiError(503, "ServiceUnavailable", f'no endpoints available for service "{name}"')

    async def service_proxy(self, request: web.Request) -> web.StreamResponse:
        namespace = request.match_info["namespace"]
        name, port = parse_target(request.match_info["target"])
        service = self.store.get("v1/services", namespace, name)
        service_port = self._service_port(service, port)
        selector = (service.get("spec") or {}).get("selector") or {}
        label_selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        target = service_port.get("targetPort", service_port.get("port"))
        endpoints = self.network.ready_endpoints(namespace, label_selector, target) if selector else []
        if not endpoints:
            raise ApiError(503, "ServiceUnavailable", f'no endpoints available for service "{name}"')
        source = self.network.source(request.headers.get(self.network.source_header))
        allowed = [e for e in endpoints if self._reachable(namespace, e.pod_name, source, target)]
        if not allowed:
            raise self.network.refused(self.store.get("v1/pods", namespace, endpoints[0].pod_name), target)
        endpoints = allowed
        body = await request.read()
        chosen = await self.choose(request, service, endpoints, body)
        return await self.forward(request, chosen.base_url, body)

    def _reachable(self, namespace: str, pod_name: str, source, target) -> bool:
        return self.network.admits(self.store.get("v1/pods", namespace, pod_name), source, target)

    async def choose(self, request: web.Request, service: dict, endpoints: list[Endpoint], body: bytes) -> Endpoint:
        """The routing policy's pick among ready endpoints, round robin by default."""
        annotations = service["metadata"].get("annotations") or {}
        policy = self.routing_policy(annotations.get(ROUTING_ANNOTATION))
        if policy is not None:
            info = ProxyRequest(
                method=request.method,
                path="/" + request.match_info.get("path", "").lstrip("/"),
                query=dict(request.query),
                headers=dict(request.headers),
                body=body,
                namespace=service["metadata"].get("namespace") or "default",
                service=service,
            )
            try:
                picked = policy(info, endpoints)
                if inspect.isawaitable(picked):
                    picked = await picked
            except Exception:
                log.exception(
                    "routing policy %s failed; falling back to round robin", annotations.get(ROUTING_ANNOTATION)
                )
                picked = None
            if picked is not None:
                return picked
        key = (service["metadata"].get("namespace") or "", service["metadata"]["name"])
        counter = self._round_robin.setdefault(key, itertools.count())
        return endpoints[next(counter) % len(endpoints)]

    # --- forwarding -----------------------------------------------------------------------------------

    async def forward(self, request: web.Request, base_url: str, body: bytes | None = None) -> web.StreamResponse:
        """Send the request to `base_url` + path and stream the answer back as it comes."""
        path = request.match_info.get("path", "")
        if not path.startswith("/"):
            path = "/" + path
        if body is None:
            body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in self._hop_by_hop}
        try:
            upstream = await self.session().request(
                request.method,
                base_url + path,
                params=request.query,
                data=body or None,
                headers=headers,
                allow_redirects=False,
            )
        except (aiohttp.ClientError, OSError) as error:
            raise ApiError(503, "ServiceUnavailable", f"error trying to reach service: {error}") from None
        try:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for key, value in upstream.headers.items():
                if key.lower() not in self._hop_by_hop:
                    response.headers.add(key, value)
            await response.prepare(request)
            try:
                await relay(upstream, response)
            except aiohttp.ClientPayloadError:
                log.debug("upstream %s ended mid-stream", base_url + path)
            return response
        finally:
            upstream.release()

    # --- logs -----------------------------------------------------------------------------------------

    async def logs(self, request: web.Request) -> web.StreamResponse:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        pod = self.store.get("v1/pods", namespace, name)
        containers = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
        container = request.query.get("container")
        if not container:
            if len(containers) > 1:
                raise ApiError.bad_request(
                    f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]"
                )
            container = containers[0] if containers else ""
        elif container not in containers:
            raise ApiError.bad_request(f"container {container} is not valid for pod {name}")
        previous = request.query.get("previous") in ("true", "1")
        if not (pod.get("spec") or {}).get("nodeName"):
            return web.Response(text="", content_type="text/plain")  # not scheduled: no log location yet
        lines = self.kubelets.logs(namespace, name, container, previous)
        if lines is None:
            if previous:
                raise ApiError.bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
            reason = "ContainerCreating"
            for status in (pod.get("status") or {}).get("containerStatuses") or []:
                if status.get("name") == container:
                    reason = ((status.get("state") or {}).get("waiting") or {}).get("reason", reason)
            raise ApiError.bad_request(f'container "{container}" in pod "{name}" is waiting to start: {reason}')
        tail = request.query.get("tailLines")
        if tail and tail.isdigit():
            lines = lines[-int(tail) :] if int(tail) else []
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        await response.write("".join(line + "\n" for line in lines).encode())
        if request.query.get("follow") in ("true", "1"):
            sent = len(self.kubelets.logs(namespace, name, container, False) or [])
            while True:
                await asyncio.sleep(0.2)
                current = self.kubelets.logs(namespace, name, container, False)
                if current is None:
                    break
                if len(current) > sent:
                    await response.write("".join(line + "\n" for line in current[sent:]).encode())
                    sent = len(current)
        await response.write_eof()
        return response
