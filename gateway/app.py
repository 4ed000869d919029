"""The ASGI application: probes, metrics, and the OpenAI endpoints' checks; a request that passes them is
forwarded by gateway/upstream.py, and its usage recorded once it is answered (a stream: once it ends).
"""

from __future__ import annotations

import asyncio
import calendar
import json
import logging
import math
import time
from collections import Counter as Tally
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.activation import Activator
from gateway.batch_api import PREFIXES as BATCH_PREFIXES
from gateway.batch_api import BatchApi
from gateway.batch_vocab import BATCH_PRIORITY, PRIORITY_HEADER
from gateway.door import QUEUE_FULL, Door
from gateway.door_report import report_loop
from gateway.errors import error_body
from gateway.fairness import DEFAULT_BAND, DEFAULT_WEIGHT, LOWEST_BAND, band_of
from gateway.gauges import queue_families, usage_gauges
from gateway.limits import Decision, Flow, RequestLimiter, completion_tokens, estimate_tokens
from gateway.metering import UsageWriter
from gateway.names import answer_headers, choose
from gateway.order import DEADLINE_MARGIN_S
from gateway.prefix import Prompt
from gateway.snapshot import SnapshotFile
from gateway.upstream import Upstreams, Usage
from gateway.validation import ENDPOINTS, Endpoint, Invalid, checked_demand, checked_model, parse
from gateway.wake import Waker

log = logging.getLogger("gateway.app")
JSON = [(b"content-type", b"application/json")]
QUEUE_RETRY_AFTER_S = 1  # a shed request may come back at once: the queue turns over in about a request's time
CLIENT_GONE = 499  # metered for a request whose client left before its answer started (nginx's code)
FAILED = error_body(500, "The gateway failed on this request.", code="internal_error")


class Gateway:
    def __init__(self, snapshot: SnapshotFile, *, max_body_bytes: int, refresh_seconds: float,
                 limiter: RequestLimiter, usage: UsageWriter | None = None, upstreams: Upstreams | None = None,
                 on_usage: Callable[[dict, int, Usage], None] | None = None, activator: Activator | None = None,
                 door: Door | None = None):
        self.snapshot = snapshot
        self.door = door or Door(enabled=False)
        if self.door.enabled and self.door.replicas > 1 and limiter.order is not None:
            self.door.share_order(limiter.order)  # one order for the replicas' queues
        self.usage = usage
        self.upstreams = upstreams or Upstreams()
        self.activator = activator or Activator(None)
        self.waker = Waker()
        # Called once per request that passed the limits, when it is answered (a stream: when it ends),
        # with its key, its service's id and what the engine reported (zeros when nothing came back).
        self.on_usage = on_usage
        self.limiter = limiter
        self.max_body_bytes = max_body_bytes
        self.refresh_seconds = refresh_seconds
        # OpenAI's files and batches, kept in the metering database (none: those endpoints answer 404).
        self.batches = BatchApi(usage.database_url, read_body) if usage is not None else None
        self.runner = None  # gateway.batch_runner.BatchRunner, started and stopped with the app
        # Interactive requests admitted and not answered yet, by service: what the batch runner leaves room for.
        self.in_flight: Tally = Tally()
        self._next_refresh = 0.0
        # One registry per app, so two gateways in one process (tests) do not clash.
        self.registry = CollectorRegistry()
        self.requests = Counter("gateway_requests", "Requests answered, by route and status.",
                                ["route", "status"], registry=self.registry)
        self.rate_limited = Counter("gateway_rate_limited", "Requests refused with 429, by reason.",
                                    ["reason"], registry=self.registry)
        self.redis_up = Gauge("gateway_redis_up", "1 while limits are shared through Redis, 0 while each "
                              "replica enforces its own share.", registry=self.registry)
        self.redis_up.set_function(lambda: 1 if limiter.redis_ok else 0)
        self.added_latency = Histogram(
            "gateway_added_latency_seconds", "Time a forwarded request spent in the gateway before its answer "
            "started, less the wait on the upstream.", registry=self.registry,
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0))
        self.upstream_ttft = Histogram(
            "gateway_upstream_ttft_seconds", "From sending a streamed request upstream to its first bytes back.",
            registry=self.registry, buckets=(0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0))
        self.redis_round_trips = Gauge("gateway_redis_round_trips", "Limit scripts run in Redis since start "
                                       "(one check per request, one settle per request let through).",
                                       registry=self.registry)
        self.redis_round_trips.set_function(lambda: limiter.round_trips)
        Gauge("gateway_upstream_reconnects", "Requests sent to another upstream because the one picked refused the "
              "connection (a pod gone since the snapshot; only grows).", registry=self.registry,
              ).set_function(lambda: self.upstreams.reconnects)
        self.queue_waiting, self.queue_seconds, self.queue_shed = queue_families(self.registry, self.door)
        if usage is not None:
            usage_gauges(self.registry, usage)

    def routing(self):
        # A stat() every refresh_seconds at most: the request path does no other I/O for routing.
        now = time.monotonic()
        if now >= self._next_refresh:
            self.snapshot.refresh()
            self._next_refresh = now + self.refresh_seconds
            self.door.tick(self.snapshot.routing.service)
        return self.snapshot.routing

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await self._lifespan(receive, send)
        path, method = scope["path"], scope["method"]
        status, headers, body = await self._handle(scope, receive, path, method)
        route = path if path in (*ENDPOINTS, "/v1/models", "/healthz", "/readyz", "/metrics") else next(
            (prefix for prefix in BATCH_PREFIXES if path.startswith(prefix)), "other")
        self.requests.labels(route, str(status)).inc()
        await send({"type": "http.response.start", "status": status, "headers": headers})
        if isinstance(body, bytes):
            await send({"type": "http.response.body", "body": body})
        else:
            await stream(body, receive, send)

    async def _lifespan(self, receive, send):
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.routing()
                if self.usage is not None:
                    self.usage.start()
                if self.runner is not None:
                    self.runner.start()
                loop = asyncio.get_running_loop()
                watching = [loop.create_task(self.door.watch_loop())]
                if self.door.order is not None:
                    watching.append(loop.create_task(self.door.order.listen()))
                if self.activator.redis is not None:
                    watching.append(loop.create_task(report_loop(self.door, self.activator.redis,
                                                                 self.activator.replica)))
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                # uvicorn has finished the requests in flight by now: their settles are waited for, and
                # what they metered is flushed here. Batch lines in flight are cancelled, and run again by the
                # next replica to hold their batch.
                if self.runner is not None:
                    await self.runner.close()
                for task in watching:
                    task.cancel()
                await self.limiter.drain()
                await self.limiter.close()
                if self.usage is not None:
                    self.usage.close()
                await self.upstreams.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _handle(self, scope, receive, path, method):
        if path == "/healthz":
            return 200, JSON, b'{"status":"ok"}'
        if path == "/readyz":
            # Metering is reported, not a condition: a replica taken out of service would stop everyone's
            # requests, and metering's rows wait (spool, queue) rather than being lost.
            ready = self.routing().loaded
            metering = self.usage.health() if self.usage is not None else "off"
            return (200 if ready else 503), JSON, json.dumps({"snapshot_loaded": ready, "metering": metering}).encode()
        if path == "/metrics":
            self.queue_waiting.clear()
            for (service, band, tenant), waiting in self.door.waiting().items():
                self.queue_waiting.labels(str(service), str(band), tenant).set(waiting)
            return 200, [(b"content-type", CONTENT_TYPE_LATEST.encode())], generate_latest(self.registry)
        if path in (*ENDPOINTS, "/v1/models") and (count := headers_named(scope, b"authorization")) > 1:
            # Two credentials are ambiguous: which one a proxy in front reads need not be the one read here.
            return 400, JSON, error_body(400, f"Send one Authorization header, not {count}.", code="duplicate_header")
        if path == "/v1/models" and method == "GET":
            key = self._key(scope)
            if key is None:
                return unauthorized()
            names = sorted(self.routing().models_for(key))
            data = [{"id": name, "object": "model", "created": 0, "owned_by": "tenant"} for name in names]
            return 200, JSON, json.dumps({"object": "list", "data": data}).encode()
        if path in ENDPOINTS and method == "POST":
            return await self._inference(scope, receive, ENDPOINTS[path])
        if path.startswith(BATCH_PREFIXES) and self.batches is not None:
            key = self._key(scope)
            return unauthorized() if key is None else await self.batches.handle(scope, receive, key, path, method)
        return 404, JSON, error_body(404, f"Unknown endpoint {method} {path}.", code="unknown_url")

    def key_by_id(self, key_id: int) -> dict | None:
        """A usable key's entry by its id (the batch runner's lines run as the key that created the batch)."""
        return next((k for k in self.routing().keys.values() if k["id"] == key_id and k["expires_at"] > time.time()),
                    None)

    def _key(self, scope) -> dict | None:
        header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        scheme, _, secret = header.partition(" ")
        if scheme.lower() != "bearer" or not secret:
            return None
        return self.routing().key(secret.strip())

    async def _inference(self, scope, receive, endpoint: Endpoint):
        key = self._key(scope)
        if key is None:
            return unauthorized()
        return await self._serve(scope, receive, key, endpoint, {"usage": Usage()})

    async def run_line(self, key: dict, path: str, body: bytes, batch_id: str) -> tuple[int, bytes, Usage]:
        """A batch line sent through the same path as a client's request, as `key`, in the lowest band: its
        status, its answer and what the engine reported; metered (marked with the batch) like any request."""
        sent = False

        async def receive():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.Event().wait()  # the runner never disconnects; cancelling the line ends this
            return {"type": "http.disconnect"}

        scope = {"type": "http", "method": "POST", "path": path, "query_string": b"",
                 "headers": [(b"content-type", b"application/json"), (PRIORITY_HEADER, BATCH_PRIORITY)]}
        meter: dict = {"usage": Usage(), "batch_id": batch_id}
        status, _, answer = await self._serve(scope, receive, key, ENDPOINTS[path], meter)
        if not isinstance(answer, bytes):
            answer = b"".join([chunk async for chunk in answer])
        return status, answer, meter["usage"]

    async def _serve(self, scope, receive, key: dict, endpoint: Endpoint, meter: dict):
        started = time.monotonic()
        status, headers, body = 500, JSON, FAILED  # what is metered (and settled) if anything below raises
        try:
            status, headers, body = await self._answer(scope, receive, key, endpoint, meter)
            if meter["usage"].pod:
                meter["added_s"] = max(0.0, time.monotonic() - started - meter["usage"].upstream_s)
                self.added_latency.observe(meter["added_s"])
        finally:
            # Every request is settled and metered once: here, or when its stream ends.
            if isinstance(body, bytes):
                self._record(key, meter, status, started)
        if isinstance(body, bytes):
            return status, headers, body
        return status, headers, metered_stream(body, lambda: self._record(key, meter, status, started))

    async def _answer(self, scope, receive, key: dict, endpoint: Endpoint, meter: dict):
        request_body = await read_body(receive, self.max_body_bytes)
        if request_body is None:
            return 413, JSON, error_body(413, f"The body is over {self.max_body_bytes} bytes.")
        try:
            # A client that goes away before the answer starts cancels the request, upstream included.
            answer = await unless_gone(self._checked(scope, key, request_body, endpoint, meter), receive)
        except Exception:
            # A fault of the gateway's own: the client gets a 500 like any other answer, and the request is
            # still settled (its concurrency lease given back) and metered.
            log.exception("a request of key %s failed in the gateway", key["id"])
            return 500, JSON, FAILED
        if answer is None:
            meter["usage"].disconnected, meter["usage"].status = True, CLIENT_GONE
            return CLIENT_GONE, JSON, b""
        return answer

    def _prefilled(self, meter: dict) -> None:
        if meter.pop("prefilled", None) is not None:
            meter["usage"].on_first = None
            self.door.prefilled(meter["door"][0])

    def _record(self, key: dict, meter: dict, status: int, started: float) -> None:
        usage: Usage = meter["usage"]
        self._prefilled(meter)  # ended without a first token (not streamed, refused, gone): counted as come
        if meter.get("door") is not None:
            self.door.leave(*meter["door"])  # its place at the service goes to the next in line
        if "in_flight" in meter:
            self.in_flight[meter.pop("in_flight")] -= 1
        if usage.ttft_ms is not None:
            self.upstream_ttft.observe(usage.ttft_ms / 1000)
        if meter.get("admitted"):
            # Settle what was reserved with what was used (tokens from the engine's usage, the lease given
            # back): queued for Redis before the answer's last bytes go, and nobody waits for the reply.
            try:
                self.limiter.settle_soon(meter["reservation"], usage.prompt_tokens, usage.completion_tokens)
            except Exception:  # a failed settle must not lose the usage row; the lease lapses by itself
                log.exception("settling the limits of key %s failed", key["id"])
        if meter.get("admitted") and self.on_usage is not None:
            try:
                self.on_usage(key, meter["service_id"], usage)
            except Exception:  # settling is the callback's business; the usage row is still written
                log.exception("on_usage failed for key %s", key["id"])
        if self.usage is not None:
            # One row per request a key made, refusals included: 429s and errors are usage too.
            self.usage.record(tenant_id=key["tenant_id"], key_id=key["id"], service_id=meter.get("service_id"),
                              model=meter.get("model", ""), pod=usage.pod, status=usage.status or status,
                              prompt_tokens=usage.prompt_tokens, cached_tokens=usage.cached_tokens,
                              completion_tokens=usage.completion_tokens, ttft_ms=usage.ttft_ms,
                              duration_ms=(time.monotonic() - started) * 1000, streamed=usage.streamed,
                              disconnected=usage.disconnected,
                              added_ms=meter["added_s"] * 1000 if "added_s" in meter else None,
                              prefix_blocks=meter.get("prompt"),
                              queued_ms=meter["queued_s"] * 1000 if "queued_s" in meter else None,
                              shed=meter.get("shed", ""), batch_id=meter.get("batch_id"))

    async def _checked(self, scope, key: dict, body: bytes, endpoint: Endpoint, meter: dict):
        try:
            request = parse(body)
            # Only a valid name is looked up, logged or metered.
            model = meter["model"] = checked_model(request, endpoint)
            demand = checked_demand(request, endpoint)
            band = band_of(key.get("priority", DEFAULT_BAND), priority_header(scope))
        except Invalid as exc:
            return 400, JSON, error_body(400, exc.message, param=exc.param)
        candidates = self.routing().models_for(key).get(model)
        if not candidates:
            # The same answer whether the model exists in another tenant or nowhere.
            return 404, JSON, error_body(404, f"The model '{model}' does not exist.", code="model_not_found",
                                         param="model")
        service, rule = choose(candidates, model, self.door.load)
        meter["service_id"] = service["id"]
        tenant = self.routing().tenants.get(str(key["tenant_id"]))
        tokens = estimate_tokens(request, demand, self.limiter.default_max_tokens)
        flow = None
        if self.door.saturated(service, band):
            # Charged only while the service is saturated: unsaturated, nobody waits, so the order is moot and
            # the request costs the round trips it did before (none for a key and tenant without limits). A
            # flow's counter is lifted to the band's virtual time when it next waits, so nothing is banked.
            # VTC's cost: the prompt once and the output twice (estimate_tokens counts the output once).
            # With more than one replica the request also waits in the band's shared order, at most as long as
            # it may wait at the door.
            wait_s = max(self.door.band_ttl(band), self.activator.max_wait) + DEADLINE_MARGIN_S
            flow = Flow(f"fair:{service['id']}:{band}", str(key["tenant_id"]), str(key["id"]),
                        int((tenant or {}).get("weight") or DEFAULT_WEIGHT),
                        tokens + completion_tokens(demand, self.limiter.default_max_tokens),
                        int(wait_s * 1000) if self.door.order is not None else 0)
        decision = await self.limiter.check({f"key:{key['id']}": key, f"tenant:{key['tenant_id']}": tenant},
                                            tokens, flow)
        limit_headers = [*ratelimit_headers(decision), *answer_headers(service, rule)]
        if not decision.allowed:
            return self._refused(decision, limit_headers)
        # From here the request holds its reservation (tokens, a concurrency lease) until _record settles it.
        meter["admitted"], meter["reservation"] = True, decision.reservation
        if "batch_id" not in meter:
            meter["in_flight"] = service["id"]
            self.in_flight[service["id"]] += 1
        # The prompt, for its prefix blocks on the usage row (the service's reuse curve): only a reference here,
        # hashed by the usage writer's thread off the request path.
        meter["prompt"] = Prompt(request, endpoint.required)
        await self.waker.wake_if_asleep(service)  # a service put to sleep instead of zero (gateway/wake.py)
        tags, place = (decision.tags, decision.place) if flow else (None, None)
        if self.activator.should_hold(service):  # the waiting room: the same queue, its own time-to-live
            waiting = self.door.enter(service, band, str(key["tenant_id"]), tags, meter,
                                      wake_ttl=self.activator.max_wait, place=place)
            shed = await self.activator.hold(service["id"], waiting, lambda: self.door.tick(self.routing().service))
            service = self.routing().service(service["id"]) or service
        else:
            shed = await self.door.enter(service, band, str(key["tenant_id"]), tags, meter, place=place)
        if shed is not None:
            return self._shed(shed, band, meter, limit_headers)
        if place is not None:  # it went on through the band's shared order, which counted its cost as served
            decision.reservation.ordered = True
        meter["door"] = service["id"], band, meter.pop("borrowed", False)
        if band > LOWEST_BAND:  # the lowest band waits for this request's first token (gateway/door.py)
            self.door.prefill(service["id"])
            meter["usage"].on_first = meter["prefilled"] = lambda: self._prefilled(meter)
        if "queued_s" in meter:
            self.queue_seconds.observe(meter["queued_s"])
        return await self.upstreams.forward(service, scope["path"], request, dict(scope["headers"]), meter["usage"],
                                            limit_headers, lambda sid: self.routing().service(sid))

    def _shed(self, reason: str, band: int, meter: dict, limit_headers: list):
        meter["shed"] = reason
        self.queue_shed.labels(reason).inc()
        if reason == QUEUE_FULL:
            message = f"The queue of band {band} for this model is full."
        else:
            message = f"The request waited {meter.get('queued_s', 0):.0f} s, its time-to-live, for this model."
        return 429, [*JSON, *limit_headers, (b"retry-after", str(QUEUE_RETRY_AFTER_S).encode())], error_body(
            429, message, code=reason)

    def _refused(self, decision: Decision, limit_headers: list):
        self.rate_limited.labels(decision.reason).inc()
        retry = str(max(1, math.ceil(decision.retry_after_ms / 1000))).encode()
        if decision.reason == "budget":
            # OpenAI's answer for a spent quota; retry-after says when the month turns.
            retry = str(max(1, math.ceil(seconds_to_next_month()))).encode()
            return 429, [*JSON, *limit_headers, (b"retry-after", retry)], error_body(
                429, "The key's or tenant's monthly token budget is spent.", code="insufficient_quota")
        return 429, [*JSON, *limit_headers, (b"retry-after", retry)], error_body(
            429, REFUSALS[decision.reason], code="rate_limit_exceeded")


REFUSALS = {"requests": "Rate limit reached for requests per minute.",
            "tokens": "Rate limit reached for tokens per minute.",
            "concurrency": "Too many requests in flight at once for this key or tenant."}


def ratelimit_headers(decision: Decision) -> list[tuple[bytes, bytes]]:
    """OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens} (reset as a duration, e.g. "12.5s"),
    each for the tightest limit of its kind that applies."""
    headers = []
    for kind, window in (("requests", decision.requests), ("tokens", decision.tokens)):
        if window is not None:
            headers += [(f"x-ratelimit-limit-{kind}".encode(), str(window.limit).encode()),
                        (f"x-ratelimit-remaining-{kind}".encode(), str(window.remaining).encode()),
                        (f"x-ratelimit-reset-{kind}".encode(), f"{window.reset_ms / 1000:g}s".encode())]
    return headers


def seconds_to_next_month(now: float | None = None) -> float:
    moment = time.gmtime(now if now is not None else time.time())
    year, month = (moment.tm_year + 1, 1) if moment.tm_mon == 12 else (moment.tm_year, moment.tm_mon + 1)
    return calendar.timegm((year, month, 1, 0, 0, 0)) - (now if now is not None else time.time())


async def metered_stream(body, record: Callable[[], None]):
    """`body`'s chunks; `record` runs once it ends, however it ends (done, client gone, upstream failed)."""
    try:
        async for chunk in body:
            yield chunk
    finally:
        await body.aclose()
        record()


async def stream(body, receive, send) -> None:
    """Send `body` chunk by chunk; a client that goes away cancels it (and so the upstream request)."""

    async def pump():
        async for chunk in body:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    sending, watching = asyncio.ensure_future(pump()), asyncio.ensure_future(client_gone(receive))
    try:
        await asyncio.wait({sending, watching}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (sending, watching):
            task.cancel()
        await asyncio.gather(sending, watching, return_exceptions=True)
        await body.aclose()


async def unless_gone(work, receive):
    """`work`'s result, or None when the client disconnects first: `work` is then cancelled (an upstream
    request in flight is closed, so the engine aborts it). `work` runs in the calling task and one watcher
    task cancels it, which costs far less per request than running `work` as a task of its own."""
    current, gone = asyncio.current_task(), False

    async def watch():
        nonlocal gone
        await client_gone(receive)
        gone = True
        current.cancel()

    watcher = asyncio.get_running_loop().create_task(watch())
    try:
        return await work
    except asyncio.CancelledError:
        if not gone:
            raise  # cancelled from elsewhere
        return None
    finally:
        watcher.cancel()
        if gone:
            current.uncancel()


async def client_gone(receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def priority_header(scope) -> str | None:
    """The request's x-priority, or None; two of them are refused (which one a proxy reads is unknown)."""
    values = [value for header, value in scope["headers"] if header == PRIORITY_HEADER]
    if len(values) > 1:
        raise Invalid(f"Send one x-priority header, not {len(values)}.", param="x-priority")
    return values[0].decode("latin-1") if values else None


def headers_named(scope, name: bytes) -> int:
    """How many headers the request has of `name` (lower case, as ASGI gives names)."""
    return sum(1 for header, _ in scope["headers"] if header == name)


def unauthorized():
    return 401, JSON, error_body(401, "Incorrect or expired API key provided.", code="invalid_api_key")


async def read_body(receive, limit: int) -> bytes | None:
    """The whole body, or None as soon as it passes `limit` (the rest is not read into memory)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)
