"""Simulated routers: the vLLM production-stack router and the SGLang router (model gateway).

Both parse their real flags, discover backends through the cluster (label selectors, as their
Kubernetes service discovery does) or static URLs, pick a backend with `routing.RoutingState`, and
forward OpenAI requests (streaming passed through chunk by chunk). Disaggregated mode sends the prompt
to a prefill engine first, then to a decode engine with the KV-transfer parameters.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import time

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from enginevocab import routers
from enginevocab.labels import ACTIVATION_HOLD_ANNOTATION, CANARY_WEIGHTS_ANNOTATION
from kubesim.engines.canary_split import RevisionSplit
from kubesim.engines.flags import EngineArgError, _Parser, table_parser
from kubesim.engines.routing import (
    DEFAULT_SESSION_HEADER,
    RequestInfo,
    RoutingState,
    engine_stats,
    pd_role,
    pick_pd,
)
from kubesim.workload import Endpoint, PodContext, WorkloadExit, listen_on_loopback, relay

_rooms = itertools.count(1)
# kubesim's routers name the backend pod that served each request in this response header (a simulator's
# aid for benchmarks and tests that attribute requests to revisions; real routers send no such header).
BACKEND_HEADER = "x-kubesim-backend"
# A router pod with this annotation holds requests while it has no ready backend (up to that many seconds)
# instead of answering 503: the activator of a service scaled to zero. The control plane renders it on
# serverless services and scales from 0 on the gauge below; real routers lack it (see ENGINES.md).
ACTIVATION_POLL_S = 0.2


def pstack_parser() -> _Parser:
    """vllm-router's parser, from the routers' vocabulary."""
    return table_parser(routers.PSTACK_PROG, routers.PSTACK_FLAGS, allow_abbrev=False)


def sglang_router_parser() -> _Parser:
    """The SGLang router's parser, from the routers' vocabulary."""
    return table_parser(routers.SGLANG_PROG, routers.SGLANG_ROUTER_FLAGS)


def _selector(pairs: list[str]) -> str:
    return ",".join(pairs)


class RouterWorkload:
    """A router pod: discovers backends, routes by policy, forwards (Workload protocol)."""

    def __init__(self, ctx: PodContext, kind: str, ns: argparse.Namespace, logs: list[str]):
        self.ctx = ctx
        self.kind = kind
        self.ns = ns
        self._logs = logs
        self.port = 0
        self.base_url = ""
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._cache: dict[str, tuple[float, list[Endpoint]]] = {}
        # A router knows its backends only through what it tracks (in-flight requests) and scrapes.
        if kind == "pstack-router":
            self.pd = ns.routing_logic.startswith("disaggregated")
            self.state = RoutingState(
                "pd" if self.pd else ns.routing_logic,
                session_key=ns.session_key or DEFAULT_SESSION_HEADER,
                seed=ctx.seed,
                use_local=False,
            )
            # kvaware reads the engines' KV usage from their /metrics every --engine-stats-interval.
            self.stats_interval = float(ns.engine_stats_interval) if ns.routing_logic == "kvaware" else None
        else:
            self.pd = ns.pd_disaggregation
            self.state = RoutingState(
                "pd" if self.pd else ns.policy,
                seed=ctx.seed,
                cache_threshold=ns.cache_threshold,
                balance_abs_threshold=ns.balance_abs_threshold,
                balance_rel_threshold=ns.balance_rel_threshold,
                use_local=False,
            )
            self.stats_interval = None
        self._stats_task: asyncio.Task | None = None
        self.registry = CollectorRegistry()
        self.m_requests = Counter("router_requests", "Requests routed, by backend.", ["server"], registry=self.registry)
        self.m_prefix = Gauge(
            "router_prefix_match_ratio", "Matched prompt chunks over all chunks routed.", registry=self.registry
        )
        self.hold_s = float(ctx.annotations.get(ACTIVATION_HOLD_ANNOTATION) or 0)
        # During a canary rollout: the share of requests the new revision's pods get.
        self.split = RevisionSplit(ctx.annotations.get(CANARY_WEIGHTS_ANNOTATION))
        self.m_pending = Gauge("router_activation_pending_requests",
                               "Requests held until a backend is ready (scale from zero).", registry=self.registry)

    def startup_seconds(self) -> float:
        return 0.5 if self.ctx.fast_start else 2.0

    def logs(self) -> list[str]:
        return list(self._logs)

    async def start(self) -> int:
        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/completions", self._forward)
        app.router.add_post("/v1/chat/completions", self._forward)
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        # A client that leaves cancels its handler, and so the request sent on to the engine, which aborts it.
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=True)
        self.port = await listen_on_loopback(self._runner)
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._logs.append(f"INFO router listening, policy={self.state.policy}")
        if self.stats_interval:
            self._stats_task = asyncio.get_running_loop().create_task(self._scrape_stats())
        return self.port

    async def _scrape_stats(self) -> None:
        while True:
            for ep in self.backends()[0]:
                try:
                    async with self._session.get(ep.base_url + "/metrics") as r:
                        kv, load = engine_stats(await r.text())
                except (aiohttp.ClientError, ValueError):
                    continue
                self.state.scraped_kv[ep.base_url] = kv
                self.state.scraped_load[ep.base_url] = load
            await asyncio.sleep(self.stats_interval)

    async def stop(self) -> None:
        if self._stats_task is not None:
            self._stats_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._stats_task
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- discovery ------------------------------------------------------------------------------------------
    def _discover(self, selector: str, port: int, namespace: str | None) -> list[Endpoint]:
        key = f"{namespace}/{selector}:{port}"
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit and now - hit[0] < 1.0:
            return hit[1]
        cluster = self.ctx.cluster
        eps = cluster.ready_endpoints(namespace or self.ctx.namespace, selector, port) if cluster else []
        self._cache[key] = (now, eps)
        return eps

    @staticmethod
    def _static(urls: list[str], role: str | None = None) -> list[Endpoint]:
        labels = {"role": role} if role else {}
        return [Endpoint(pod_name=u, base_url=u.rstrip("/"), labels=labels) for u in urls if u]

    def backends(self) -> tuple[list[Endpoint], list[Endpoint], list[Endpoint]]:
        """(all, prefill, decode) endpoints right now."""
        ns = self.ns
        if self.kind == "pstack-router":
            if ns.service_discovery == "k8s":
                eps = self._discover(ns.k8s_label_selector, ns.k8s_port, ns.k8s_namespace)
            else:
                eps = self._static((ns.static_backends or "").split(","))
                if ns.static_model_labels:
                    labels = ns.static_model_labels.split(",")
                    eps = [Endpoint(e.pod_name, e.base_url, {"role": lab}) for e, lab in zip(eps, labels, strict=False)]
            # A backend is prefill (decode) by its role label, or by carrying one of the model labels given.
            pre_l = set((ns.prefill_model_labels or "prefill").split(","))
            dec_l = set((ns.decode_model_labels or "decode").split(","))
            pre = [e for e in eps if pd_role(e) == "prefill" or pre_l & set(e.labels.values())]
            dec = [e for e in eps if pd_role(e) == "decode" or dec_l & set(e.labels.values())]
            return eps, pre, dec
        port, nsp = ns.service_discovery_port, ns.service_discovery_namespace
        if ns.service_discovery:
            if ns.pd_disaggregation:
                pre = self._discover(_selector(ns.prefill_selector), port, nsp)
                dec = self._discover(_selector(ns.decode_selector), port, nsp)
                return pre + dec, pre, dec
            eps = self._discover(_selector(ns.selector), port, nsp)
            return eps, [], []
        pre = self._static([p[0] for p in ns.prefill], "prefill")
        dec = self._static(list(ns.decode), "decode")
        eps = self._static(ns.worker_urls) + pre + dec
        return eps, pre, dec

    def probe(self, method: str, path: str) -> int | None:
        """The kubelet's health probe answered in-process (what `/health` answers); other paths over HTTP."""
        return 200 if method == "GET" and path == "/health" else None

    # -- HTTP -----------------------------------------------------------------------------------------------
    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "healthy"})

    async def _metrics(self, request: web.Request) -> web.Response:
        self.m_prefix.set(self.state.prefix_match_ratio())
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": "text/plain; version=0.0.4"})

    async def _models(self, request: web.Request) -> web.Response:
        eps, _, dec = self.backends()
        seen, data = set(), []
        for ep in dec or eps:
            try:
                async with self._session.get(ep.base_url + "/v1/models") as r:
                    body = await r.json()
            except (aiohttp.ClientError, ValueError):
                continue
            for card in body.get("data", []):
                if card["id"] not in seen:
                    seen.add(card["id"])
                    data.append(card)
        return web.json_response({"object": "list", "data": data})

    def _no_backend(self, eps, pre, dec) -> bool:
        return not (pre and dec) if self.pd else not eps

    async def _await_backends(self):
        """Hold the request while no backend is ready (activation), counted in the pending gauge."""
        found = self.backends()
        if self.hold_s <= 0 or not self._no_backend(*found):
            return found
        self.m_pending.inc()
        try:
            deadline = time.monotonic() + self.hold_s
            while self._no_backend(*found) and time.monotonic() < deadline:
                await asyncio.sleep(ACTIVATION_POLL_S)
                self._cache.clear()
                found = self.backends()
        finally:
            self.m_pending.dec()
        return found

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        info = RequestInfo.from_http(request.path, request.headers, raw)
        eps, pre, dec = await self._await_backends()
        if self.split:
            eps, pre, dec = self.split.narrow(self.split.choose(eps), eps, pre, dec)
        try:
            if self.pd:
                p, d = pick_pd(info, eps, self.state, prefill=pre, decode=dec)
                raw = await self._prefill(p, request.path, raw)
                if isinstance(raw, web.Response):
                    return raw
                ep = d
            else:
                ep = self.state.pick(info, eps)
        except LookupError as e:
            return web.json_response({"error": {"message": str(e), "type": "ServiceUnavailable"}}, status=503)
        self.m_requests.labels(ep.base_url).inc()
        try:
            return await self._proxy(request, ep, raw)
        finally:
            self.state.done(ep)

    async def _prefill(self, ep: Endpoint, path: str, raw: bytes) -> bytes | web.Response:
        body = json.loads(raw)
        pre = dict(body, stream=False, max_tokens=1)
        pre.pop("stream_options", None)
        room = next(_rooms)
        if self.kind == "pstack-router":
            pre["kv_transfer_params"] = {"do_remote_decode": True, "do_remote_prefill": False}
        else:
            pre.update(bootstrap_host="127.0.0.1", bootstrap_room=room)
        self.m_requests.labels(ep.base_url).inc()
        async with self._session.post(ep.base_url + path, json=pre) as r:
            result = await r.json()
            if r.status != 200:
                return web.json_response(result, status=r.status)
        if self.kind == "pstack-router":
            body["kv_transfer_params"] = result.get("kv_transfer_params") or {"do_remote_prefill": True}
        else:
            body.update(bootstrap_host="127.0.0.1", bootstrap_room=room)
        return json.dumps(body).encode()

    async def _proxy(self, request: web.Request, ep: Endpoint, raw: bytes) -> web.StreamResponse:
        headers = {"Content-Type": "application/json"}
        try:
            upstream = await self._session.post(ep.base_url + request.path, data=raw, headers=headers)
        except aiohttp.ClientError as e:
            return web.json_response({"error": {"message": f"backend {ep.base_url}: {e}"}}, status=502)
        async with upstream:
            resp = web.StreamResponse(status=upstream.status, headers={BACKEND_HEADER: ep.pod_name})
            ctype = upstream.headers.get("Content-Type")
            if ctype:
                resp.content_type = ctype.split(";")[0]
            await resp.prepare(request)
            await relay(upstream, resp)
            return resp


def router_workload(kind: str, argv: list[str], ctx: PodContext) -> RouterWorkload:
    """Parse a router container's argv (entrypoint words stripped) into a RouterWorkload."""
    words = list(argv)
    # Drop the entrypoint: `vllm-router`, `python -m sglang_router.launch_router`, `sgl-model-gateway`, ...
    if words and words[0].rsplit("/", 1)[-1].startswith("python") and words[1:2] == ["-m"]:
        words = words[3:]
    while words and not words[0].startswith("-"):
        words = words[1:]
    parser = pstack_parser() if kind == "pstack-router" else sglang_router_parser()
    try:
        ns = parser.parse_args(words)
    except EngineArgError as e:
        raise WorkloadExit(e.lines[-1], exit_code=2, logs=e.lines) from None
    if kind == "pstack-router" and ns.service_discovery == "k8s" and not ns.k8s_label_selector:
        raise WorkloadExit("ValueError: --k8s-label-selector is required for k8s service discovery")
    logs = [f"INFO starting {'vLLM production-stack' if kind == 'pstack-router' else 'SGLang'} router"]
    return RouterWorkload(ctx, kind, ns, logs)
