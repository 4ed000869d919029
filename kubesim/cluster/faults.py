"""Fault injection for tests and demos: API errors, latency, dropped watches, conflicts, node and pod failure.

`FaultConfig` is the state (set from CLI flags at start and through `GET/PUT/PATCH /kubesim/faults`);
`fault_middleware` applies the request-level faults to API calls; node failure and pod crashes are
acted on by the cluster (kubesim/cluster.py) through the callbacks it registers on `FaultInjector`.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, fields

from aiohttp import web

from kubesim.apiserver.selectors import parse_label_selector
from kubesim.workload import EngineFault

ERROR_CODES = (500, 503, 429)
_NAMED_OBJECT = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)(?:/namespaces/[^/]+)?/(?P<plural>[^/]+)/(?P<name>[^/]+)(?:/[^/]+)?$"
)


@dataclass
class FaultConfig:
    """The active faults: rates are per-request probabilities; counts fail the next N requests."""

    error_rate: float = 0.0
    error_count: int = 0
    error_codes: list[int] = field(default_factory=lambda: list(ERROR_CODES))
    retry_after_seconds: int = 1
    latency_ms: float = 0.0
    latency_jitter_ms: float = 0.0
    watch_drop_seconds: float | None = None
    watch_drop_rate: float = 0.0  # each watch is cut, within its first two seconds, with this probability
    conflict_rate: float = 0.0
    conflict_count: int = 0
    methods: list[str] = field(default_factory=list)  # limit errors and latency to these verbs (empty: all)
    path_contains: str = ""  # limit errors, latency and conflicts to paths containing this
    failed_nodes: list[str] = field(default_factory=list)
    # Faults of simulated engines, each {"selector": "<label selector>", "slowdown": k, "error_rate": p,
    # "crash_on_start": bool}; a pod takes the first whose selector matches its labels when its engine starts.
    engine_faults: list[dict] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict, base: FaultConfig | None = None) -> FaultConfig:
        """A config from JSON, layered over `base`; unknown keys and bad values raise ValueError."""
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown fault settings: {', '.join(sorted(unknown))}")
        merged = asdict(base or cls())
        merged.update(data)
        config = cls(**merged)
        config.validate()
        return config

    def validate(self) -> None:
        for name in ("error_rate", "conflict_rate", "watch_drop_rate"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not 0 <= value <= 1:
                raise ValueError(f"{name} must be a number between 0 and 1")
        for name in ("error_count", "conflict_count", "retry_after_seconds"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer")
        for name in ("latency_ms", "latency_jitter_ms"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or value < 0:
                raise ValueError(f"{name} must be a non-negative number")
        if self.watch_drop_seconds is not None and (
            not isinstance(self.watch_drop_seconds, int | float) or self.watch_drop_seconds <= 0
        ):
            raise ValueError("watch_drop_seconds must be a positive number or null")
        if not self.error_codes or any(code not in ERROR_CODES for code in self.error_codes):
            raise ValueError(f"error_codes must be chosen from {list(ERROR_CODES)}")
        if not all(isinstance(name, str) for name in self.failed_nodes):
            raise ValueError("failed_nodes must be a list of node names")
        self.methods = [method.upper() for method in self.methods]
        for rule in self.engine_faults:
            _check_engine_fault(rule)

    def engine_fault_for(self, pod_labels: dict[str, str]) -> EngineFault | None:
        """The first engine fault whose selector matches the pod's labels, or None."""
        for rule in self.engine_faults:
            match = parse_label_selector(rule["selector"])
            if match is not None and match({"metadata": {"labels": pod_labels}}):
                return EngineFault(slowdown=float(rule.get("slowdown", 1.0)),
                                   error_rate=float(rule.get("error_rate", 0.0)),
                                   crash_on_start=bool(rule.get("crash_on_start", False)))
        return None


ENGINE_FAULT_KEYS = {"selector", "slowdown", "error_rate", "crash_on_start"}


def _check_engine_fault(rule) -> None:
    if not isinstance(rule, dict) or set(rule) - ENGINE_FAULT_KEYS:
        raise ValueError(f"engine_faults entries take {', '.join(sorted(ENGINE_FAULT_KEYS))}")
    selector = rule.get("selector")
    if not isinstance(selector, str) or not selector:
        raise ValueError("engine_faults: selector must be a non-empty label selector")
    try:
        parse_label_selector(selector)
    except ValueError as error:
        raise ValueError(f"engine_faults: selector {selector!r}: {error}") from error
    slowdown = rule.get("slowdown", 1.0)
    if isinstance(slowdown, bool) or not isinstance(slowdown, int | float) or slowdown < 1:
        raise ValueError("engine_faults: slowdown must be a number of at least 1 (the factor on step time)")
    rate = rule.get("error_rate", 0.0)
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
        raise ValueError("engine_faults: error_rate must be a number between 0 and 1")
    if not isinstance(rule.get("crash_on_start", False), bool):
        raise ValueError("engine_faults: crash_on_start must be true or false")


def error_status(code: int, retry_after: int) -> tuple[dict, dict[str, str]]:
    """The Status body and headers the apiserver sends for an injected 500, 503 or 429."""
    if code == 429:
        reason, message = "TooManyRequests", "Too many requests, please try again later."
        details = {"retryAfterSeconds": retry_after}
        headers = {"Retry-After": str(retry_after)}
    elif code == 503:
        reason, message = "ServiceUnavailable", "the server is currently unable to handle the request"
        details, headers = {}, {}
    else:
        reason = "InternalError"
        message = "Internal error occurred: kubesim injected fault"
        details, headers = {"causes": [{"message": "kubesim injected fault"}]}, {}
    body = {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "details": details, "code": code,
    }
    return body, headers


def conflict_status(path: str) -> dict:
    """The 409 Conflict Status for a write to the object at `path` (wording of a stale resourceVersion)."""
    match = _NAMED_OBJECT.match(path)
    group = (match.group("group") if match else None) or ""
    plural = match.group("plural") if match else "objects"
    name = match.group("name") if match else ""
    resource = f"{plural}.{group}" if group else plural
    return {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        "reason": "Conflict", "details": {"name": name, "group": group, "kind": plural}, "code": 409,
    }


class FaultInjector:
    """Holds the fault config, decides per request, and tells the cluster about node failures and crashes."""

    def __init__(self, config: FaultConfig | None = None, seed: int = 0):
        self.config = config or FaultConfig()
        self.injected = {"errors": 0, "conflicts": 0}  # answered with an injected fault since start
        self.random = random.Random(seed)
        self.on_nodes_changed: Callable[[set[str]], Awaitable[None]] | None = None
        self.on_crash: Callable[[str, str, str | None], Awaitable[bool]] | None = None

    async def set_config(self, config: FaultConfig) -> None:
        before = set(self.config.failed_nodes)
        self.config = config
        if set(config.failed_nodes) != before and self.on_nodes_changed is not None:
            await self.on_nodes_changed(set(config.failed_nodes))

    def _applies(self, request: web.Request, for_errors: bool) -> bool:
        config = self.config
        if config.path_contains and config.path_contains not in request.path:
            return False
        return not (for_errors and config.methods and request.method not in config.methods)

    def pick_error(self, request: web.Request) -> int | None:
        """The status code to fail this request with, if any."""
        config = self.config
        if not self._applies(request, True):
            return None
        if config.error_count > 0:
            config.error_count -= 1
        elif not (config.error_rate and self.random.random() < config.error_rate):
            return None
        self.injected["errors"] += 1
        return self.random.choice(config.error_codes)

    def pick_conflict(self, request: web.Request) -> bool:
        """Whether to answer this update with an injected 409 Conflict."""
        if request.method not in ("PUT", "PATCH") or not _NAMED_OBJECT.match(request.path):
            return False
        config = self.config
        if not self._applies(request, False):
            return False
        if config.conflict_count > 0:
            config.conflict_count -= 1
        elif not (config.conflict_rate and self.random.random() < config.conflict_rate):
            return False
        self.injected["conflicts"] += 1
        return True

    def watch_drop(self, request: web.Request) -> float | None:
        """Seconds after which to cut this watch, or None to leave it be."""
        if request.query.get("watch") not in ("true", "1"):
            return None
        config = self.config
        if config.watch_drop_seconds:
            return config.watch_drop_seconds
        if config.watch_drop_rate and self.random.random() < config.watch_drop_rate:
            return self.random.uniform(0.1, 2.0)
        return None

    def latency(self, request: web.Request) -> float:
        config = self.config
        if not (config.latency_ms or config.latency_jitter_ms) or not self._applies(request, True):
            return 0.0
        return (config.latency_ms + self.random.uniform(0, config.latency_jitter_ms)) / 1000


def _is_api_request(request: web.Request) -> bool:
    return request.path.startswith(("/api", "/version", "/openapi"))


def fault_middleware(injector: FaultInjector):
    """An aiohttp middleware that applies latency, errors, conflicts and watch drops to API requests."""

    @web.middleware
    async def middleware(request: web.Request, handler):
        if not _is_api_request(request):
            return await handler(request)
        delay = injector.latency(request)
        if delay:
            await asyncio.sleep(delay)
        code = injector.pick_error(request)
        if code is not None:
            body, headers = error_status(code, injector.config.retry_after_seconds)
            return web.json_response(body, status=code, headers=headers)
        if injector.pick_conflict(request):
            return web.json_response(conflict_status(request.path), status=409)
        drop = injector.watch_drop(request)
        if drop and request.transport is not None:
            # Cut the TCP connection mid-stream, as a load balancer or apiserver restart would.
            timer = asyncio.get_running_loop().call_later(drop, request.transport.close)
            try:
                return await handler(request)
            finally:
                timer.cancel()
        return await handler(request)

    return middleware


def admin_routes(injector: FaultInjector) -> list[web.RouteDef]:
    """`/kubesim/faults` (GET the config, PUT to replace it, PATCH to change parts) and
    `POST /kubesim/faults/crash` ({"namespace", "pod", "container"?}) to crash a pod's container now;
    `GET /kubesim/faults/injected`: the errors and conflicts injected since start."""

    async def get_faults(request: web.Request) -> web.Response:
        return web.json_response(asdict(injector.config))

    async def get_injected(request: web.Request) -> web.Response:
        return web.json_response(injector.injected)

    async def put_faults(request: web.Request) -> web.Response:
        try:
            data = await request.json()
            if not isinstance(data, dict):
                raise ValueError("expected a JSON object")
            base = injector.config if request.method == "PATCH" else None
            config = FaultConfig.from_dict(data, base)
        except (ValueError, TypeError, json.JSONDecodeError) as error:
            return web.json_response({"error": str(error)}, status=400)
        await injector.set_config(config)
        return web.json_response(asdict(injector.config))

    async def crash(request: web.Request) -> web.Response:
        try:
            data = await request.json()
            namespace, pod = data.get("namespace", "default"), data["pod"]
        except (ValueError, KeyError, AttributeError, json.JSONDecodeError):
            return web.json_response({"error": 'expected {"namespace": ..., "pod": ...}'}, status=400)
        if injector.on_crash is None or not await injector.on_crash(namespace, pod, data.get("container")):
            return web.json_response({"error": f"no running pod {namespace}/{pod}"}, status=404)
        return web.json_response({"crashed": f"{namespace}/{pod}"})

    return [
        web.get("/kubesim/faults", get_faults),
        web.get("/kubesim/faults/injected", get_injected),
        web.put("/kubesim/faults", put_faults),
        web.patch("/kubesim/faults", put_faults),
        web.post("/kubesim/faults/crash", crash),
    ]
