"""Routing policies for simulated routers and kubesim's service proxy (autoscaling-and-routing.md section 5).

`pick(policy, request_info, endpoints)` chooses one ready endpoint. Policies keep state (a round-robin
counter, the prefix index, in-flight counts) in a `RoutingState`; `pick` keeps one per (policy, service)
unless the caller passes its own. Load is read from engines in this process when available (queue
length and KV usage of the simulated engine), else from what the router scraped or its in-flight count.

- round robin; random; power of two choices (lower load of two random endpoints);
- session: rendezvous (consistent) hashing of the session header (`x-session-id` unless configured),
  least loaded without one;
- prefix-aware / cache_aware: the prompt in 128-character chunks, chained hashes, an index of which
  endpoint saw each chain; the longest match wins unless load is imbalanced (max - min > abs and
  max > rel x min), when the least-loaded endpoint wins; below `cache_threshold` match ratio, least loaded;
- kv-aware: the lowest KV-cache usage;
- pick_pd: a prefill and a decode endpoint for disaggregated pairs.
"""

from __future__ import annotations

import json
import random
import zlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field

from kubesim.workload import Endpoint

CHUNK_CHARS = 128
DEFAULT_SESSION_HEADER = "x-session-id"  # the header AIBrix and the control plane's rendered routers use

POLICY_ALIASES = {
    "roundrobin": "round_robin",
    "round_robin": "round_robin",
    "round-robin": "round_robin",
    "random": "random",
    "power_of_two": "power_of_two",
    "session": "session",
    "session_affinity": "session",
    "prefixaware": "prefix_aware",
    "prefix_aware": "prefix_aware",
    "cache_aware": "cache_aware",
    "kvaware": "kv_aware",
    "kv_aware": "kv_aware",
    "least_loaded": "least_loaded",
    "disaggregated_prefill": "pd",
    "pd": "pd",
}


def normalise_policy(policy: str) -> str:
    try:
        return POLICY_ALIASES[policy.strip().lower()]
    except KeyError:
        raise ValueError(f"unknown routing policy {policy!r}; known: {sorted(POLICY_ALIASES)}") from None


@dataclass
class RequestInfo:
    """What a policy may look at: headers and the prompt text (messages concatenated)."""

    path: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    prompt: str = ""
    service: str = ""

    @classmethod
    def from_http(cls, path: str, headers: Mapping[str, str], body: bytes, service: str = "") -> RequestInfo:
        prompt = ""
        if body:
            try:
                data = json.loads(body)
            except (ValueError, UnicodeDecodeError):
                data = None
            if isinstance(data, dict):
                prompt = prompt_text(data)
        return cls(path=path, headers={k.lower(): v for k, v in headers.items()}, prompt=prompt, service=service)


def prompt_text(body: dict) -> str:
    if isinstance(body.get("messages"), list):
        out = []
        for m in body["messages"]:
            c = m.get("content") if isinstance(m, dict) else None
            if isinstance(c, list):
                c = " ".join(x.get("text", "") for x in c if isinstance(x, dict))
            out.append(str(c or ""))
        return "".join(out)
    p = body.get("prompt")
    if isinstance(p, list):
        return " ".join(str(x) for x in p)
    return str(p or "")


def chunk_hashes(text: str, chunk: int = CHUNK_CHARS) -> list[int]:
    """Chained crc32 hashes of the text's full and final chunks: equal hash i means equal first i chunks."""
    out, h = [], 0
    for i in range(0, len(text), chunk):
        h = zlib.crc32(text[i : i + chunk].encode(), h)
        out.append(h)
    return out


class RoutingState:
    """Per-router state of a policy; `pick` is synchronous and cheap."""

    def __init__(
        self,
        policy: str,
        *,
        session_key: str = DEFAULT_SESSION_HEADER,
        seed: int = 0,
        cache_threshold: float | None = None,
        balance_abs_threshold: float = 64,
        balance_rel_threshold: float = 1.5,
        max_index: int = 1_000_000,
        use_local: bool = True,
    ):
        self.policy = normalise_policy(policy)
        self.session_key = session_key.lower()
        self.rng = random.Random(seed)
        # prod-stack's prefixaware takes any match; SGLang's cache_aware needs ratio > 0.3 by default.
        if cache_threshold is None:
            cache_threshold = 0.3 if self.policy == "cache_aware" else 0.0
        self.cache_threshold = cache_threshold
        self.balance_abs = balance_abs_threshold
        self.balance_rel = balance_rel_threshold
        self.max_index = max_index
        self.rr = 0
        self.index: OrderedDict[int, set[str]] = OrderedDict()
        self.in_flight: dict[str, int] = {}
        self.requests: dict[str, int] = {}
        # In-process engines are read directly unless the router must rely on what it scraped/tracked.
        self.use_local = use_local
        self.scraped_load: dict[str, float] = {}
        self.scraped_kv: dict[str, float] = {}
        self.prefix_chunks = 0
        self.prefix_matched = 0

    # -- load signals ----------------------------------------------------------------------------------------
    def load(self, ep: Endpoint) -> float:
        from kubesim.engines.server import LOCAL_ENGINES

        eng = LOCAL_ENGINES.get(ep.base_url) if self.use_local else None
        if eng is not None:
            return eng.load()
        if ep.base_url in self.scraped_load:
            return self.scraped_load[ep.base_url]
        return self.in_flight.get(ep.base_url, 0)

    def kv_usage(self, ep: Endpoint) -> float:
        from kubesim.engines.server import LOCAL_ENGINES

        eng = LOCAL_ENGINES.get(ep.base_url) if self.use_local else None
        if eng is not None:
            return eng.kv_usage()
        return self.scraped_kv.get(ep.base_url, 0.0)

    def prefix_match_ratio(self) -> float:
        return self.prefix_matched / self.prefix_chunks if self.prefix_chunks else 0.0

    # -- policies --------------------------------------------------------------------------------------------
    def pick(self, info: RequestInfo, endpoints: list[Endpoint]) -> Endpoint:
        if not endpoints:
            raise LookupError("no ready endpoints")
        eps = sorted(endpoints, key=lambda e: e.base_url)
        p = self.policy
        if p in ("round_robin", "pd"):
            ep = eps[self.rr % len(eps)]
            self.rr += 1
        elif p == "random":
            ep = self.rng.choice(eps)
        elif p == "power_of_two":
            a, b = self.rng.sample(eps, 2) if len(eps) > 1 else (eps[0], eps[0])
            ep = a if self.load(a) <= self.load(b) else b
        elif p == "least_loaded":
            ep = self._least_loaded(eps)
        elif p == "session":
            key = info.headers.get(self.session_key)
            if key is None:
                ep = self._least_loaded(eps)
            else:
                ep = max(eps, key=lambda e: zlib.crc32(f"{key}|{e.base_url}".encode()))
        elif p == "kv_aware":
            ep = min(eps, key=lambda e: (self.kv_usage(e), self.load(e), e.base_url))
        else:
            ep = self._prefix(info, eps)
        self.requests[ep.base_url] = self.requests.get(ep.base_url, 0) + 1
        self.in_flight[ep.base_url] = self.in_flight.get(ep.base_url, 0) + 1
        return ep

    def done(self, ep: Endpoint) -> None:
        """The request sent to `ep` finished (keeps in-flight counts for endpoints not in this process)."""
        n = self.in_flight.get(ep.base_url, 0)
        if n > 0:
            self.in_flight[ep.base_url] = n - 1

    def _least_loaded(self, eps: list[Endpoint]) -> Endpoint:
        loads = [(self.load(e), i) for i, e in enumerate(eps)]
        low = min(loads)[0]
        ties = [eps[i] for load, i in loads if load == low]
        ep = ties[self.rr % len(ties)]
        self.rr += 1
        return ep

    def _prefix(self, info: RequestInfo, eps: list[Endpoint]) -> Endpoint:
        hashes = chunk_hashes(info.prompt)
        urls = {e.base_url: e for e in eps}
        matched, candidates = 0, set(urls)
        for h in hashes:
            holders = self.index.get(h)
            if not holders:
                break
            narrowed = candidates & holders
            if not narrowed:
                break
            candidates, matched = narrowed, matched + 1
        ratio = matched / len(hashes) if hashes else 0.0
        loads = {u: self.load(e) for u, e in urls.items()}
        hi, lo = max(loads.values()), min(loads.values())
        imbalanced = hi - lo > self.balance_abs and hi > self.balance_rel * lo
        if imbalanced or matched == 0 or ratio <= self.cache_threshold:
            ep = self._least_loaded(eps)
            matched = 0 if imbalanced else matched
        else:
            best = min(candidates, key=lambda u: (loads[u], u))
            ep = urls[best]
        self.prefix_chunks += len(hashes)
        self.prefix_matched += matched if ep.base_url in candidates else 0
        for h in hashes:
            holders = self.index.get(h)
            if holders is None:
                self.index[h] = {ep.base_url}
                if len(self.index) > self.max_index:
                    self.index.popitem(last=False)
            else:
                holders.add(ep.base_url)
                self.index.move_to_end(h)
        return ep


def engine_stats(exposition: str) -> tuple[float, float]:
    """(KV-cache usage, running + waiting requests) from a vLLM or SGLang /metrics page."""
    kv, load = 0.0, 0.0
    for line in exposition.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        value = float(line.rsplit(" ", 1)[1])
        if name in ("vllm:kv_cache_usage_perc", "sglang:token_usage"):
            kv = max(kv, value)
        elif name in (
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "sglang:num_running_reqs",
            "sglang:num_queue_reqs",
        ):
            load += value
    return kv, load


def pd_role(ep: Endpoint) -> str | None:
    """'prefill' or 'decode' from an endpoint's labels (any label whose value is one of them)."""
    for key in ("llm-d.ai/role", "role", "kubesim.io/role", "app.kubernetes.io/component"):
        v = ep.labels.get(key)
        if v in ("prefill", "decode"):
            return v
    return None


_STATES: dict[tuple[str, str], RoutingState] = {}


def state_for(policy: str, service: str = "", session_key: str = DEFAULT_SESSION_HEADER) -> RoutingState:
    """The shared state of `policy` for one service (created on first use)."""
    key = (normalise_policy(policy), service)
    st = _STATES.get(key)
    if st is None:
        st = _STATES[key] = RoutingState(policy, session_key=session_key)
    return st


SESSION_KEY_ANNOTATION = "kubesim.io/session-key"


def proxy_policy(policy: str):
    """A service-proxy routing function (see `kubesim.apiserver.proxy.Proxies`) for `policy`."""

    def choose(request, endpoints: list[Endpoint]) -> Endpoint:
        meta = (request.service or {}).get("metadata") or {}
        service = f"{request.namespace}/{meta.get('name', '')}"
        session_key = (meta.get("annotations") or {}).get(SESSION_KEY_ANNOTATION, DEFAULT_SESSION_HEADER)
        info = RequestInfo.from_http(request.path, request.headers, request.body, service=service)
        return state_for(policy, service, session_key).pick(info, endpoints)

    return choose


def service_proxy_policies() -> dict:
    """Every policy name the service proxy serves (all but "pd", which needs a router) -> its routing function."""
    return {name: proxy_policy(name) for name, canonical in POLICY_ALIASES.items() if canonical != "pd"}


def pick(
    policy: str, request_info: RequestInfo, endpoints: list[Endpoint], state: RoutingState | None = None
) -> Endpoint:
    """One endpoint for a request by `policy` (round_robin, session, prefix_aware, cache_aware, kv_aware,
    random, power_of_two, least_loaded; prod-stack and SGLang spellings accepted). For "pd" it returns
    the prefill endpoint; use `pick_pd` for the pair."""
    st = state or state_for(policy, request_info.service)
    if st.policy == "pd":
        return pick_pd(request_info, endpoints, st)[0]
    return st.pick(request_info, endpoints)


def pick_pd(
    request_info: RequestInfo,
    endpoints: list[Endpoint],
    state: RoutingState | None = None,
    prefill: list[Endpoint] | None = None,
    decode: list[Endpoint] | None = None,
) -> tuple[Endpoint, Endpoint]:
    """(prefill, decode) endpoints: explicit lists, or split by role labels; each side least loaded."""
    st = state or state_for("pd", request_info.service)
    pre = prefill if prefill is not None else [e for e in endpoints if pd_role(e) == "prefill"]
    dec = decode if decode is not None else [e for e in endpoints if pd_role(e) == "decode"]
    if not pre or not dec:
        raise LookupError("disaggregated routing needs ready prefill and decode endpoints")
    p, d = (
        st._least_loaded(sorted(pre, key=lambda e: e.base_url)),
        st._least_loaded(sorted(dec, key=lambda e: e.base_url)),
    )
    for ep in (p, d):
        st.requests[ep.base_url] = st.requests.get(ep.base_url, 0) + 1
    return p, d
