"""The ASGI application: probes, metrics, and the OpenAI endpoints' checks up to choosing an upstream.

Upstream forwarding is not built yet (README "Gateway"): a request that passes every check is answered
503 with retry-after, as for a service with no ready endpoint, which is what the snapshot says today.
"""

from __future__ import annotations

import calendar
import json
import math
import time

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest

from gateway.errors import error_body
from gateway.limits import Decision, RequestLimiter, estimate_tokens
from gateway.metering import UsageWriter
from gateway.snapshot import SnapshotFile

JSON = [(b"content-type", b"application/json")]
RETRY_AFTER_SECONDS = 5
OPENAI_POSTS = {"/v1/chat/completions": "messages", "/v1/completions": "prompt"}


class Gateway:
    def __init__(self, snapshot: SnapshotFile, *, max_body_bytes: int, refresh_seconds: float,
                 limiter: RequestLimiter, usage: UsageWriter | None = None):
        self.snapshot = snapshot
        self.usage = usage
        self.limiter = limiter
        self.max_body_bytes = max_body_bytes
        self.refresh_seconds = refresh_seconds
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
        self.redis_round_trips = Gauge("gateway_redis_round_trips", "Limit scripts run in Redis since start "
                                       "(one check per request, one settle per request let through).",
                                       registry=self.registry)
        self.redis_round_trips.set_function(lambda: limiter.round_trips)

    def routing(self):
        # A stat() every refresh_seconds at most: the request path does no other I/O for routing.
        now = time.monotonic()
        if now >= self._next_refresh:
            self.snapshot.refresh()
            self._next_refresh = now + self.refresh_seconds
        return self.snapshot.routing

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await self._lifespan(receive, send)
        path, method = scope["path"], scope["method"]
        status, headers, body = await self._handle(scope, receive, path, method)
        route = path if path in (*OPENAI_POSTS, "/v1/models", "/healthz", "/readyz", "/metrics") else "other"
        self.requests.labels(route, str(status)).inc()
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _lifespan(self, receive, send):
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.routing()
                if self.usage is not None:
                    self.usage.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                # uvicorn has finished the requests in flight by now: what they metered is flushed here.
                if self.usage is not None:
                    self.usage.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _handle(self, scope, receive, path, method):
        if path == "/healthz":
            return 200, JSON, b'{"status":"ok"}'
        if path == "/readyz":
            ready = self.routing().loaded
            return (200 if ready else 503), JSON, json.dumps({"snapshot_loaded": ready}).encode()
        if path == "/metrics":
            return 200, [(b"content-type", CONTENT_TYPE_LATEST.encode())], generate_latest(self.registry)
        if path == "/v1/models" and method == "GET":
            key = self._key(scope)
            if key is None:
                return unauthorized()
            names = sorted(self.routing().models_for(key))
            data = [{"id": name, "object": "model", "created": 0, "owned_by": "tenant"} for name in names]
            return 200, JSON, json.dumps({"object": "list", "data": data}).encode()
        if path in OPENAI_POSTS and method == "POST":
            return await self._inference(scope, receive, OPENAI_POSTS[path])
        return 404, JSON, error_body(404, f"Unknown endpoint {method} {path}.", code="unknown_url")

    def _key(self, scope) -> dict | None:
        header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        scheme, _, secret = header.partition(" ")
        if scheme.lower() != "bearer" or not secret:
            return None
        return self.routing().key(secret.strip())

    async def _inference(self, scope, receive, required: str):
        key = self._key(scope)
        if key is None:
            return unauthorized()
        started = time.monotonic()
        meter: dict = {}
        status, headers, body = await self._checked(key, receive, required, meter)
        if self.usage is not None:
            # One row per request a key made, refusals included: 429s and errors are usage too.
            self.usage.record(tenant_id=key["tenant_id"], key_id=key["id"], service_id=meter.get("service_id"),
                              model=meter.get("model", ""), pod="", status=status, prompt_tokens=0,
                              cached_tokens=0, completion_tokens=0, ttft_ms=None,
                              duration_ms=(time.monotonic() - started) * 1000, streamed=False,
                              disconnected=False)
        return status, headers, body

    async def _checked(self, key: dict, receive, required: str, meter: dict):
        body = await read_body(receive, self.max_body_bytes)
        if body is None:
            return 413, JSON, error_body(413, f"The body is over {self.max_body_bytes} bytes.")
        try:
            request = json.loads(body)
        except ValueError:
            return 400, JSON, error_body(400, "The body is not valid JSON.")
        if not isinstance(request, dict):
            return 400, JSON, error_body(400, "The body must be a JSON object.")
        for name in ("model", required):
            if name not in request:
                return 400, JSON, error_body(400, f"'{name}' is a required property.", param=name)
        model = request["model"]
        meter["model"] = str(model)[:200]
        service = self.routing().models_for(key).get(model) if isinstance(model, str) else None
        if service is None:
            # The same answer whether the model exists in another tenant or nowhere.
            return 404, JSON, error_body(404, f"The model '{model}' does not exist.", code="model_not_found",
                                         param="model")
        meter["service_id"] = service["id"]
        tenant = self.routing().tenants.get(str(key["tenant_id"]))
        decision = self.limiter.check({f"key:{key['id']}": key, f"tenant:{key['tenant_id']}": tenant},
                                      estimate_tokens(request, self.limiter.default_max_tokens))
        limit_headers = ratelimit_headers(decision)
        if not decision.allowed:
            return self._refused(decision, limit_headers)
        # Forwarding is not built yet: the request ends here, having used no tokens.
        self.limiter.settle(decision.reservation, 0, 0)
        headers = [*JSON, *limit_headers, (b"retry-after", str(RETRY_AFTER_SECONDS).encode())]
        return 503, headers, error_body(503, f"No replica of '{model}' is ready.", code="no_ready_replica")

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
