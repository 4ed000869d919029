"""kubesim's HTTP API server: the aiohttp app, its extension points and lifecycle (handlers in `handlers`).

Extension points for the simulated cluster built on top (scheduler, controllers, kubelet, proxies):

    server = Server(port=0, token=None, seed=1, state_file=None, authorization="open",   # or "rbac"
                    tls=False)                  # True: HTTPS, self-signed (kubectl sends tokens over HTTPS only)
    server.store                                # the in-process Store (see kubesim.apiserver.store)
    server.add_admission_hook(fn)               # fn(AdmissionRequest) -> None; raise ApiError to reject
    server.add_route("GET", "/api/v1/namespaces/{namespace}/pods/{name}/log", handler)
    server.add_middleware(mw)                   # aiohttp @web.middleware; runs inside auth, outside the API
    server.access                               # authentication, RBAC and tokens (kubesim.apiserver.access)
    server.requests                             # Counter of requests answered by verb ("WATCH" for watches);
                                                #   also GET /kubesim/requests
    server.add_background_task(fn)              # fn(server) -> coroutine, started with the server, cancelled
                                                #   at shutdown (controllers)
    await server.start(); server.url; await server.stop()      # on a running loop
    server.start_in_thread(); server.stop_in_thread()           # tests: own loop in a thread
    app = server.build_app()                    # the aiohttp Application, if you run it yourself

Routes added with add_route are matched before the generic API router, so paths like
`/api/v1/namespaces/{ns}/pods/{name}:{port}/proxy/{path:.*}` or `.../pods/{name}/log` reach their own
handlers; an unknown subresource otherwise gets 404. All registration must happen before start.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import logging
import socket
import threading
from collections.abc import Awaitable, Callable

from aiohttp import web

from . import rbac
from .access import Access
from .admission import AdmissionHook
from .errors import ApiError
from .handlers import ApiHandlers, status_response
from .store import Store
from .tls import self_signed

__all__ = ["SERVER_KEY", "Server"]

log = logging.getLogger("kubesim.apiserver.server")
# request.app[SERVER_KEY] is the Server, for handlers registered with add_route.
SERVER_KEY = web.AppKey("kubesim", object)
GC_FULL_PASS_GROWTH = 1.0  # a full collection once the frozen objects grew by this share (see _gc_loop)


def full_pass_due(frozen: int, baseline: int, growth: float = GC_FULL_PASS_GROWTH) -> bool:
    """Whether a full collection is worth its stall: the frozen objects grew by `growth` (a share) since
    `baseline`, what the last full pass left (or the first count)."""
    return frozen > baseline * (1 + growth)


def _is_watch(request: web.Request) -> bool:
    """A watch: `?watch=true`, or the legacy `/api/v1/watch/...` and `/apis/GROUP/VERSION/watch/...` paths."""
    if request.query.get("watch", "").lower() in ("1", "true"):
        return True
    parts = request.path.split("/")
    return (parts[1:2] == ["api"] and parts[3:4] == ["watch"]) or (parts[1:2] == ["apis"] and parts[4:5] == ["watch"])


class Server:
    """The kubesim API server: a Store behind aiohttp, plus the registered extensions."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                 seed: int | None = None, state_file: str | None = None, history_size: int = 10000,
                 bookmark_interval: float = 30.0, watch_coalesce: float = 0.002, tune_gc: bool = False,
                 store: Store | None = None, authorization: str = "open", tls: bool = False):
        self.host = host
        self.port = port
        self.token = token
        self.tls = tls  # serve HTTPS with a self-signed certificate made at start (kubesim.apiserver.tls)
        self.ca_pem: bytes | None = None
        self.state_file = state_file
        self.bookmark_interval = bookmark_interval
        self.watch_coalesce = watch_coalesce  # seconds a watch waits to batch events into one write
        self.tune_gc = tune_gc  # for a process that is mostly this server (the CLI): see _gc_loop
        self.gc_check_rounds = 60  # seconds between counts of the frozen objects (_gc_loop)
        self.gc_full_pass_growth = GC_FULL_PASS_GROWTH
        self.store = store or Store(seed=seed, history_size=history_size)
        if state_file:
            self.store.load(state_file)
        rbac.install_defaults(self.store)
        # authentication, RBAC ("rbac" enforces it; "open" lets every authenticated request through), tokens
        self.access = Access(self.store, mode=authorization, admin_token=token)
        self._dirty = False
        self.store.on_change.append(self._mark_dirty)
        # Requests answered, by verb ("WATCH" for watches, else the HTTP method): GET /kubesim/requests.
        self.requests: collections.Counter[str] = collections.Counter()
        self._routes: list[tuple[str, str, Callable]] = []
        self._middlewares: list = []
        self._tasks_fns: list[Callable[[Server], Awaitable]] = []
        self._tasks: list[asyncio.Task] = []
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ registration

    def add_admission_hook(self, hook: AdmissionHook) -> None:
        self.store.add_admission_hook(hook)

    def add_route(self, method: str, path: str, handler: Callable) -> None:
        """An extra aiohttp route, matched before the Kubernetes API router."""
        self._routes.append((method, path, handler))

    def add_middleware(self, middleware) -> None:
        """An aiohttp middleware (e.g. fault injection) run after auth, before any handler."""
        self._middlewares.append(middleware)

    def add_background_task(self, fn: Callable[[Server], Awaitable]) -> None:
        """`fn(server)` returns a coroutine run as a task while the server runs (controllers)."""
        self._tasks_fns.append(fn)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    def _mark_dirty(self, _event=None) -> None:
        self._dirty = True

    # ------------------------------------------------------------------ app

    def build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._count_middleware, self._error_middleware, self.access.middleware,
                                           *self._middlewares],
                              client_max_size=64 * 1024 * 1024)
        app[SERVER_KEY] = self
        for method, path, handler in [*self._routes, *self.access.routes()]:
            app.router.add_route(method, path, handler)
        api = ApiHandlers(self)
        r = app.router
        r.add_get("/kubesim/requests", self._request_counts)
        r.add_get("/version", api.version)
        r.add_get("/version/", api.version)
        for probe in ("/healthz", "/livez", "/readyz"):
            r.add_get(probe, api.ok)
        r.add_get("/api", api.core_versions)
        r.add_get("/api/", api.core_versions)
        r.add_get("/apis", api.groups)
        r.add_get("/apis/", api.groups)
        r.add_get("/openapi/v2", api.openapi_v2)
        r.add_get("/swagger-2.0.0.pb-v1", api.openapi_v2)
        r.add_get("/openapi/v3", api.openapi_v3_index)
        r.add_get("/openapi/v3/{path:.*}", api.openapi_v3)
        r.add_route("*", "/api/{tail:.*}", api.dispatch)
        r.add_route("*", "/apis/{tail:.*}", api.dispatch)
        app.on_startup.append(self._on_startup)
        app.on_cleanup.append(self._on_cleanup)
        return app

    @web.middleware
    async def _count_middleware(self, request: web.Request, handler):
        if request.path != "/kubesim/requests":
            self.requests["WATCH" if _is_watch(request) else request.method] += 1
        return await handler(request)

    async def _request_counts(self, request: web.Request) -> web.Response:
        """The requests answered so far by verb (not counting this one): `{"GET": 12, "WATCH": 3, ...}`."""
        return web.json_response(dict(self.requests))

    @web.middleware
    async def _error_middleware(self, request: web.Request, handler):
        try:
            return await handler(request)
        except ApiError as e:
            return status_response(e)
        except web.HTTPNotFound:
            return status_response(ApiError.path_not_found())
        except web.HTTPMethodNotAllowed:
            return status_response(ApiError.method_not_allowed())
        except web.HTTPException:
            raise
        except Exception as e:  # a bug must still answer with a Status, as the apiserver does
            log.exception("internal error serving %s %s", request.method, request.path)
            return status_response(ApiError(500, "InternalError", f"Internal error occurred: {e}",
                                            {"causes": [{"message": str(e)}]}))

    async def _on_startup(self, app: web.Application) -> None:
        for fn in self._tasks_fns:
            self._tasks.append(asyncio.ensure_future(fn(self)))
        if self.state_file:
            self._tasks.append(asyncio.ensure_future(self._persist_loop()))
        if self.tune_gc:
            self._tasks.append(asyncio.ensure_future(self._gc_loop()))

    async def _on_cleanup(self, app: web.Application) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()
        if self.state_file:
            self.store.save(self.state_file)

    async def _gc_loop(self) -> None:
        """Keep full garbage collections short: stored objects are acyclic and long-lived, so they are moved
        out of the collector's sight (gc.freeze) every second. Without this, full collections over
        thousands of stored objects stall every request and watch for 100 ms or more.

        Cyclic garbage frozen while still alive is only freed by a full pass over everything, which stalls
        the server for as long as it takes: 2.0-4.3 s over the 1.1-3.4 million objects of 2,000 services
        (`bench/reconcile.py`), where five such passes freed 37 objects in all. So the frozen objects are
        counted every `gc_check_rounds` seconds (30-50 ms at that size), and a full pass runs only once
        they have grown by `gc_full_pass_growth` (doubled, by default) since the last one or the first
        count: garbage stays bounded by what is alive, and a steady cluster is never stalled for nothing
        (the pass used to run every 5 minutes)."""
        rounds, baseline = 0, None
        while True:
            await asyncio.sleep(1.0)
            rounds += 1
            gc.collect(1)
            gc.freeze()
            if rounds % self.gc_check_rounds:
                continue
            frozen = gc.get_freeze_count()
            if baseline is None:
                baseline = frozen
            elif full_pass_due(frozen, baseline, self.gc_full_pass_growth):
                gc.unfreeze()
                gc.collect()
                gc.freeze()
                baseline = gc.get_freeze_count()

    async def _persist_loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            if self._dirty:
                self._dirty = False
                self.store.save(self.state_file)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Listen on host:port (port 0 picks a free one; `self.port` is set)."""
        self.loop = asyncio.get_running_loop()
        # bind first so the port is known to background tasks started during app startup
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        self._runner = web.AppRunner(self.build_app(), access_log=None, handle_signals=False,
                                     shutdown_timeout=1.0)
        await self._runner.setup()
        ssl_context = None
        if self.tls:
            ssl_context, self.ca_pem = self_signed(self.host)
        await web.SockSite(self._runner, sock, ssl_context=ssl_context).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def start_in_thread(self) -> Server:
        """Run the server on its own event loop in a daemon thread; returns once it listens."""
        ready = threading.Event()
        errors: list[BaseException] = []

        def run():
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start())
            except BaseException as e:  # surfaced to the caller below
                errors.append(e)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self.stop())
            loop.close()

        self._thread = threading.Thread(target=run, name="kubesim", daemon=True)
        self._thread.start()
        ready.wait(30)
        if errors:
            raise errors[0]
        return self

    def stop_in_thread(self) -> None:
        if self.loop is not None and self._thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self._thread = None

    def call(self, fn: Callable, *args, **kwargs):
        """Run `fn(*args, **kwargs)` on the server's loop from another thread and return its result."""
        async def run():
            return fn(*args, **kwargs)
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)
