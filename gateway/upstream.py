"""Forwarding a checked request to one of its service's ready upstreams (the snapshot's `endpoints`:
`podIP:port` of its router or its engine pods), directly over HTTP with aiohttp, never through the API
server.

Streamed answers pass through one server-sent event at a time as they arrive; `stream_options.include_usage`
is always asked of the engine so every request is metered, and the usage event (and the `"usage": null` the
engine then adds to every chunk) is kept from a client that did not ask for it. Non-streamed answers and the
engine's own errors pass through as they are. What the engine reported fills the request's `Usage`.

An upstream that refuses the connection (a pod gone since the snapshot was written: scaled down, or a router
replaced when a rollout changes its weights) has been sent nothing, so the request goes to another of the
service's upstreams; when every one it knows has refused, it waits for the snapshot to name a new one, up to
`reconnect_seconds`, and only then is answered 503.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from gateway.balance import Balancer, affinity_key
from gateway.errors import error_body

JSON = [(b"content-type", b"application/json")]
PASSED_HEADERS = ("content-type", "x-request-id")
FORWARDED_REQUEST_HEADERS = (b"x-request-id", b"x-session-id")


@dataclass
class Usage:
    """One request's metering as the engine reported it, filled while it is answered."""

    pod: str = ""
    status: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    ttft_ms: float | None = None
    upstream_s: float = 0.0  # waiting on the upstream before the answer could start (a whole body if not streamed)
    streamed: bool = False
    disconnected: bool = False
    on_first: Callable[[], None] | None = None  # called once, when the first bytes of a stream come back

    def read(self, usage: dict | None) -> None:
        if not isinstance(usage, dict):
            return
        self.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        self.completion_tokens = int(usage.get("completion_tokens") or 0)
        self.cached_tokens = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)


class Upstreams:
    """The gateway's client side: one connection pool, the balancer, the timeouts."""

    def __init__(self, *, connect_timeout: float = 5.0, read_timeout: float = 300.0, retry_after: int = 5,
                 backend_pod_header: str = "", reconnect_seconds: float = 15.0, poll_seconds: float = 0.25):
        self.balancer = Balancer()
        self.reconnect_seconds, self.poll_seconds = reconnect_seconds, poll_seconds
        self.reconnects = 0  # requests sent to another upstream after one refused the connection (only grows)
        # A router that names the engine pod it chose in this response header: the usage row records that pod
        # rather than the router's (kubesim's routers send x-kubesim-backend; empty: the router's pod).
        self.backend_pod_header = backend_pod_header
        self.timeout = aiohttp.ClientTimeout(sock_connect=connect_timeout, sock_read=read_timeout)
        self.retry_after = retry_after
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        # Created in the serving loop, on first use; keeps connections to upstreams alive between requests.
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=None, enable_cleanup_closed=True)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self.timeout,
                                                  auto_decompress=False, skip_auto_headers=("User-Agent",))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def unavailable(self, model: str, headers: list) -> tuple:
        return 503, [*JSON, *headers, (b"retry-after", str(self.retry_after).encode())], error_body(
            503, f"No replica of '{model}' is ready.", code="no_ready_replica")

    async def _endpoint(self, service: dict, key: str | None, refused: set[str],
                        lookup: Callable[[int], dict | None] | None,
                        adapter: str | None = None) -> tuple[dict, dict | None]:
        """(the service's entry, the upstream to try) avoiding those that `refused`; once they are all refused,
        the snapshot (`lookup`) is asked again until it names another or `reconnect_seconds` pass (None)."""
        deadline = None
        while True:
            endpoints = service["endpoints"]
            if refused:  # only after a refusal: the usual request builds no list
                endpoints = [e for e in endpoints if e["address"] not in refused]
            endpoint = self.balancer.pick(endpoints, key, adapter)
            if endpoint is not None or not refused or lookup is None:
                return service, endpoint
            deadline = deadline or time.monotonic() + self.reconnect_seconds
            if time.monotonic() >= deadline:
                return service, None
            await asyncio.sleep(self.poll_seconds)
            service = lookup(service["id"]) or service

    async def forward(self, service: dict, path: str, request: dict, client_headers: dict, usage: Usage,
                      headers: list, lookup: Callable[[int], dict | None] | None = None) -> tuple:
        """(status, headers, body) where body is bytes, or an async iterator of bytes for a stream.
        `headers` (the gateway's own, e.g. rate limits) are added to the answer; `lookup` gives the service's
        current snapshot entry by id, asked when every upstream known has refused the connection."""
        model = request["model"]
        key = None if service.get("routed") else affinity_key(service.get("routing_policy", ""), request,
                                                                client_headers)
        refused: set[str] = set()
        adapter = model if model in service.get("adapters", ()) else None  # LoRA affinity (balance.py)
        while True:
            service, endpoint = await self._endpoint(service, key, refused, lookup, adapter)
            if endpoint is None:
                return self.unavailable(model, headers)
            answer = await self._send(service, endpoint, path, request, client_headers, usage, headers)
            if answer is not None:
                return answer
            refused.add(endpoint["address"])
            self.reconnects += 1

    async def _send(self, service: dict, endpoint: dict, path: str, request: dict, client_headers: dict,
                    usage: Usage, headers: list) -> tuple | None:
        """The answer of `endpoint`, or None when it refused the connection (nothing was sent)."""
        model = request["model"]
        usage.pod = endpoint["pod"]
        usage.streamed = bool(request.get("stream"))
        client_wants_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        upstream = dict(request)
        if model == service["name"]:
            upstream["model"] = service["served_model"]  # the engine knows its served name, not the service's
        if usage.streamed:
            upstream["stream_options"] = {**(request.get("stream_options") or {}), "include_usage": True}
        sent = {k.decode(): client_headers[k].decode("latin-1") for k in FORWARDED_REQUEST_HEADERS
                if k in client_headers}
        address = endpoint["address"]
        self.balancer.acquire(address)
        started = time.monotonic()
        response = None
        try:
            response = await self.session().post(f"http://{address}{path}", json=upstream, headers=sent)
            usage.upstream_s = time.monotonic() - started
            answer = [(k.lower().encode(), v.encode("latin-1")) for k, v in response.headers.items()
                      if k.lower() in PASSED_HEADERS]
            usage.status = response.status
            if self.backend_pod_header and response.headers.get(self.backend_pod_header):
                usage.pod = response.headers[self.backend_pod_header][:253]
            if not usage.streamed or response.status != 200:
                body = await response.read()
                usage.upstream_s = time.monotonic() - started
                if response.status == 200:
                    usage.read(_json(body).get("usage"))
                self._done(address, response)
                return response.status, [*answer, *headers], body
        except TimeoutError:
            self._done(address, response)
            return 504, [*JSON, *headers], error_body(504, f"'{model}' did not answer in time.", code="timeout")
        except aiohttp.ClientConnectorError:
            self._done(address, response)
            return None
        except aiohttp.ClientError:
            self._done(address, response)
            return self.unavailable(model, headers)
        except BaseException:  # cancelled (the client left): the connection is closed, so the engine aborts
            if response is not None:
                response.close()
            self._done(address, response)
            raise
        return 200, [*answer, *headers], Stream(self, address, response, usage, started, client_wants_usage)

    def _done(self, address: str, response) -> None:
        self.balancer.release(address)
        if response is not None:
            response.release()


class Stream:
    """A streamed answer: the upstream's events as they arrive (a partial event waits for its end, nothing
    more). `aclose()` always releases the upstream, even for a stream never read."""

    def __init__(self, upstreams: Upstreams, address: str, response, usage: Usage, started: float,
                 client_wants_usage: bool):
        self.upstreams, self.address, self.response, self.usage = upstreams, address, response, usage
        self.started, self.client_wants_usage = started, client_wants_usage
        self._events = self._read()
        self._released = False

    def __aiter__(self):
        return self._events

    async def aclose(self) -> None:
        await self._events.aclose()
        self._release()

    def _release(self) -> None:
        if not self._released:
            self._released = True
            self.upstreams._done(self.address, self.response)

    async def _read(self):
        usage, pending = self.usage, b""
        try:
            async for chunk in self.response.content.iter_any():
                if usage.ttft_ms is None:
                    usage.ttft_ms = (time.monotonic() - self.started) * 1000
                    if usage.on_first is not None:
                        usage.on_first()
                pending += chunk
                end = pending.rfind(b"\n\n")
                if end < 0:
                    continue
                complete, pending = pending[: end + 2], pending[end + 2:]
                out = metered(complete, usage, self.client_wants_usage)
                if out:
                    yield out
            if pending:
                yield pending
        except TimeoutError:
            usage.status = 504  # mid-stream no status can change: the client sees the stream end early
        except (asyncio.CancelledError, GeneratorExit):
            usage.disconnected = True
            self.response.close()  # closing the connection is what makes the engine abort the request
            raise
        finally:
            self._release()


def metered(events: bytes, usage: Usage, client_wants_usage: bool) -> bytes:
    """Read the usage event out of complete events; drop it (and the nulls) unless the client asked."""
    if b'"usage"' not in events:
        return events
    kept = []
    for event in events.split(b"\n\n")[:-1]:
        if b'"usage": {' in event or b'"usage":{' in event:
            payload = _json(event.partition(b"data:")[2])
            usage.read(payload.get("usage"))
            if not client_wants_usage and payload.get("choices") == []:
                continue
        if not client_wants_usage:
            event = event.replace(b', "usage": null', b"").replace(b',"usage":null', b"")
        kept.append(event + b"\n\n")
    return b"".join(kept)


def _json(body: bytes) -> dict:
    try:
        value = json.loads(body)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
