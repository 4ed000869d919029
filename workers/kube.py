"""Talking to one Kubernetes cluster: clients from credentials, server-side apply, drift-aware sync, pruning.

This is the only module that builds Kubernetes clients. It reads no Django models: callers pass a
`ClusterCredentials` (from `Cluster.credentials()`) and plain object dicts (rendered manifests), so the
same code runs against a real cluster and kubesim. Errors leave here classified (workers/kubeerrors.py):
`TransientClusterError` (retry with backoff) or `PermanentClusterError` (a Failed condition).
"""

from __future__ import annotations

import json
import logging
import os
import random
import tempfile
import threading
import time
import uuid
from collections.abc import Collection, Iterable
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.conf import settings
from kubernetes import client as k8s
from kubernetes import dynamic
from kubernetes.dynamic.discovery import LazyDiscoverer

from apps.clusters import kubeclient
from apps.clusters.incluster import InClusterCredentialsMissing
from apps.serving.names import FIELD_MANAGER
from workers.drift import drift_diff, is_subset
from workers.kubecache import KindCache, WriteLog, uid_of_selector
from workers.kubeerrors import ClusterError, KindNotServed, PermanentClusterError, TransientClusterError, classify

if TYPE_CHECKING:
    from apps.clusters.models import ClusterCredentials

log = logging.getLogger(__name__)
REQUEST_TIMEOUT_SECONDS = kubeclient.REQUEST_TIMEOUT_SECONDS
PASS_DEADLINE_MESSAGE = "the pass ran past its deadline; it will be retried"
CALL_ATTEMPTS = 3  # per call, on transient errors (the task retries the whole pass after that)
FIRST_SYNC_WAIT_SECONDS = 15.0  # a read waits this long for a new watch cache's first list...
CATCH_UP_WAIT_SECONDS = 2.0  # ...and this long for a live one to see this process's own last write
CACHE_POOL_SIZE = 16  # the watch caches' connections: one per kind watched (12 managed kinds and Pods)

def api_client(creds: ClusterCredentials, pool_size: int | None = None,
               timeout_seconds: float = REQUEST_TIMEOUT_SECONDS) -> k8s.ApiClient:
    """`apps.clusters.kubeclient.api_client` (every request with a timeout), with missing in-cluster
    credentials as a permanent error."""
    try:
        return kubeclient.api_client(creds, pool_size, timeout_seconds)
    except InClusterCredentialsMissing as exc:
        raise PermanentClusterError(str(exc)) from exc


@dataclass(frozen=True)
class ObjectRef:
    """Identity of one object: apiVersion, kind, namespace ('' for cluster-scoped), name."""

    api_version: str
    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, obj: dict) -> ObjectRef:
        meta = obj.get("metadata", {})
        return cls(obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"


@dataclass
class SyncResult:
    """What one sync pass did: objects applied (created or corrected), left alone, and pruned."""

    applied: list[ObjectRef] = field(default_factory=list)
    unchanged: list[ObjectRef] = field(default_factory=list)
    pruned: list[ObjectRef] = field(default_factory=list)
    live: dict[ObjectRef, dict] = field(default_factory=dict)
    drift: dict[ObjectRef, str] = field(default_factory=dict)  # unified diff, live → desired, before applying

    @property
    def writes(self) -> int:
        return len(self.applied) + len(self.pruned)


class InMemoryDiscoverer(LazyDiscoverer):
    """The dynamic client's discovery, kept in memory only. The library's own keeps it in a file in the temporary
    directory named by the API server's URL, read by every later client of that URL in any process: an API
    server at that address again (upgraded, or another cluster on a reused address) would be taken for the old
    one. Here the cache file's name is new for each client and is never written, so nothing is read back."""

    def __init__(self, client, cache_file):
        super().__init__(client, os.path.join(tempfile.gettempdir(), f"controlplane-discovery-{uuid.uuid4().hex}"))

    def _write_cache(self):
        pass


class Kube:
    """One cluster's API: a DynamicClient with discovery cached for the life of the object."""

    def __init__(self, creds: ClusterCredentials, timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
                 pool_size: int | None = None):
        self.creds = creds
        self.timeout_seconds = timeout_seconds
        self._api = api_client(creds, pool_size, timeout_seconds)
        self._deadline = threading.local()  # per thread: the scraper shares one Kube across its pool
        self._dyn: dynamic.DynamicClient | None = None
        self._rediscover = False  # the discovery of `_dyn` failed: the next lookup makes a new client
        self._resources: dict[tuple[str, str], object] = {}
        self._api_server_cidrs: tuple[str, ...] | None = None
        # Shared objects found as desired: ref -> (the desired object's canonical JSON, monotonic time).
        self._shared_checked: dict[ObjectRef, tuple[str, float]] = {}
        self.requests = 0  # API calls made (reads and writes), for metrics and benchmarks
        self.writes = 0
        # Watch caches (workers.kubecache), one per kind, on a client of their own; and what this client wrote,
        # which a cached read of the same service's objects must have seen (read-your-writes).
        self.use_cache = settings.KUBE_WATCH_CACHE
        self._caches: dict[tuple[str, str], KindCache] = {}
        self._cache_api: k8s.ApiClient | None = None
        self._cache_pid: int | None = None
        self._written = WriteLog()
        self.parallel = settings.KUBE_PARALLEL_REQUESTS  # calls of one pass in flight at once (`each`)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid: int | None = None
        self._count_lock = threading.Lock()

    def close(self) -> None:
        if self._cache_pid == os.getpid():
            for cache in self._caches.values():
                cache.stop()
        if self._pool is not None and self._pool_pid == os.getpid():
            self._pool.shutdown(wait=False)
        self._api.close()
        if self._cache_api is not None and self._cache_pid == os.getpid():
            self._cache_api.close()

    @property
    def cache_requests(self) -> int:  # lists and watches of the watch caches (not in `requests`)
        return sum(c.lists + c.watches for c in self._caches.values())

    def cache(self, api_version: str, kind: str) -> KindCache:
        """This process's watch cache of a kind, started on first use (a forked worker starts its own)."""
        key = (api_version, kind)
        cache = self._caches.get(key)
        if cache is not None and cache.pid == os.getpid() and (not cache.stopped or cache.refused):
            return cache  # a refused one stays: its reads answer None at once, the wire answers
        res = self.resource(api_version, kind)
        with _clients_lock:
            if self._cache_pid != os.getpid():  # first use, or a forked child: its own connections and threads
                self._caches, self._cache_pid = {}, os.getpid()
                self._cache_api = api_client(self.creds, CACHE_POOL_SIZE, self.timeout_seconds)
            cache = self._caches.get(key)
            if cache is None or cache.stopped:
                cache = self._caches[key] = KindCache(self._cache_api, res.path(), f"{api_version} {kind}").start()
        return cache

    def _cached(self, api_version: str, kind: str, namespace: str | None, label_selector: str | None,
                field_selector: str | None) -> list[dict] | None:
        """The answer of the kind's watch cache, or None when the wire must answer."""
        uid = uid_of_selector(label_selector)
        if not self.use_cache or uid is None or field_selector:
            return None
        cache = self.cache(api_version, kind)
        wait = FIRST_SYNC_WAIT_SECONDS if not cache.live else CATCH_UP_WAIT_SECONDS
        try:
            wait = min(wait, self._timeout())
        except TransientClusterError:
            return None
        return cache.read(namespace, uid, min_rv=self._written.needed((api_version, kind), uid), wait=wait)

    def __enter__(self) -> Kube:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def api_server_cidrs(self) -> tuple[str, ...]:
        """The API server's addresses as /32 (or /128) blocks from the `default/kubernetes` Endpoints (read once):
        the source of the proxy traffic the tenant NetworkPolicy must let in. Empty (logged) if unreadable."""
        if self._api_server_cidrs is None:
            try:
                endpoints = self.get(ObjectRef("v1", "Endpoints", "default", "kubernetes")) or {}
            except PermanentClusterError as exc:
                log.warning("cannot read the API server's addresses (%s); tenant NetworkPolicies will not "
                            "admit its proxy", exc.message)
                endpoints = {}
            ips = sorted({a["ip"] for s in endpoints.get("subsets") or [] for a in s.get("addresses") or []})
            self._api_server_cidrs = tuple(f"{ip}/{128 if ':' in ip else 32}" for ip in ips)
        return self._api_server_cidrs

    @property
    def core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self._api)

    @contextmanager
    def pass_deadline(self, seconds: float):
        """Bound every call made in this block (in this thread) by one total deadline: each call's timeout
        shrinks to the time left, and a call past the deadline raises TransientClusterError."""
        previous = getattr(self._deadline, "at", None)
        self._deadline.at = time.monotonic() + seconds
        try:
            yield
        finally:
            self._deadline.at = previous

    def _timeout(self) -> float:
        at = getattr(self._deadline, "at", None)
        if at is None:
            return self.timeout_seconds
        left = at - time.monotonic()
        if left <= 0:
            raise TransientClusterError(PASS_DEADLINE_MESSAGE)
        return min(self.timeout_seconds, left)

    def _call(self, fn, *args, **kwargs):
        """One API call (reads, server-side apply and delete are all idempotent), retried on transient errors with
        a short jittered backoff inside the pass deadline: at a 10% error rate a pass of 15 calls would otherwise
        fail four times in five and wait for the task's own, longer backoff."""
        for attempt in range(CALL_ATTEMPTS):
            timeout = self._timeout()
            with self._count_lock:
                self.requests += 1
            try:
                return fn(*args, _request_timeout=timeout, **kwargs)
            except Exception as exc:
                at = getattr(self._deadline, "at", None)
                if at is not None and time.monotonic() >= at:  # cut short by the pass deadline, not the cluster
                    raise TransientClusterError(PASS_DEADLINE_MESSAGE) from exc
                error = classify(exc)
                if not isinstance(error, TransientClusterError) or attempt == CALL_ATTEMPTS - 1:
                    raise error from exc
                pause = min(error.retry_after or 0.0, 1.0) or random.uniform(0, 0.1 * 2**attempt)
                time.sleep(min(pause, max(0.0, (at or float("inf")) - time.monotonic())))
        raise AssertionError("unreachable")

    def resource(self, api_version: str, kind: str):
        key = (api_version, kind)
        if key not in self._resources:
            self._timeout()  # discovery too respects the pass deadline
            try:
                if self._dyn is None or self._rediscover:
                    # A new client, swapped in whole: later calls on kinds already resolved go through it
                    # with the resources the old one found (they stay valid; only its discovery cache was
                    # in doubt), and a call already under way finishes on the old one.
                    self._dyn = dynamic.DynamicClient(self._api, discoverer=InMemoryDiscoverer)
                    self._rediscover = False
                self._resources[key] = self._dyn.resources.get(api_version=api_version, kind=kind)
            except Exception as exc:
                error = classify(exc)
                if isinstance(error, KindNotServed):
                    raise error from exc
                # A lookup the library's discovery cannot answer from memory makes it throw its cache away and
                # read the server's again; a failed read there (a 503) leaves that cache without its resources,
                # and every later lookup of a kind not yet resolved then fails with KeyError('resources') for
                # the life of the client. So after a failed discovery the next lookup starts a new client, and
                # one that failed without an HTTP answer is worth that retry.
                self._rediscover = True
                if error.status is None and not isinstance(error, TransientClusterError):
                    error = TransientClusterError(f"discovery failed: {error.message}")
                raise error from exc
        return self._resources[key]

    def apply(self, obj: dict, *, force: bool = True) -> dict:
        """Server-side apply `obj` as our field manager, taking ownership of our fields when forced."""
        ref = ObjectRef.of(obj)
        res = self.resource(ref.api_version, ref.kind)
        with self._count_lock:
            self.writes += 1
        out = self._call(
            self._dyn.server_side_apply, res, body=obj, name=ref.name, namespace=ref.namespace or None,
            field_manager=FIELD_MANAGER, force_conflicts=force,
        ).to_dict()
        self._written.note((ref.api_version, ref.kind), out, self._caches)
        return out

    def get(self, ref: ObjectRef) -> dict | None:
        res = self.resource(ref.api_version, ref.kind)
        try:
            return self._call(self._dyn.get, res, name=ref.name, namespace=ref.namespace or None).to_dict()
        except ClusterError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, *, namespace: str | None = None,
             label_selector: str | None = None, field_selector: str | None = None,
             cached: bool = False) -> list[dict]:
        """The matching objects; with `cached`, from the kind's watch cache when it can answer (a selector
        of one service's uid, a live watch that has seen this client's last write of the kind)."""
        res = self.resource(api_version, kind)
        if cached:
            hit = self._cached(api_version, kind, namespace, label_selector, field_selector)
            if hit is not None:
                return hit
        out = self._call(self._dyn.get, res, namespace=namespace, label_selector=label_selector,
                         field_selector=field_selector)
        return list(out.to_dict().get("items", []))

    def previous_log(self, namespace: str, pod: str, container: str, tail_lines: int = 50) -> str:
        """The last lines the container's previous run printed (`kubectl logs --previous`); '' when none."""
        try:
            return self._call(self.core.read_namespaced_pod_log, pod, namespace, container=container or None,
                              previous=True, tail_lines=tail_lines) or ""
        except ClusterError as exc:
            if exc.status in (400, 404):  # no previous container yet, or the pod is gone
                return ""
            raise

    def delete(self, ref: ObjectRef, *, propagation: str = "Background") -> bool:
        """Delete one object; False when it was already gone."""
        res = self.resource(ref.api_version, ref.kind)
        self.writes += 1
        try:
            self._call(self._dyn.delete, res, name=ref.name, namespace=ref.namespace or None,
                       body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation})
        except ClusterError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def sync(self, desired: Iterable[dict], *, selector: str, managed_kinds: Iterable[tuple[str, str]],
             namespace: str | None = None, unlabelled: Iterable[dict] = (),
             recheck_unlabelled_after: float = 0.0, apply_first: Collection[str] = ()) -> SyncResult:
        """Converge the cluster on `desired` with as few writes as possible.

        Objects carrying `selector` are read with one list per kind; each desired object is applied only
        when missing or drifted (`is_subset`), and labelled objects no longer desired are pruned.
        `unlabelled` objects (shared ones such as the tenant Namespace) are read by name and applied when
        missing or drifted, never pruned; one this client found as desired less than
        `recheck_unlabelled_after` seconds ago, with the same desired content, is not read again (every
        service of a tenant shares them: each is checked once per interval, not once per service and
        pass). A failed pass forgets those checks. A steady-state pass therefore makes reads only.
        Objects are applied side by side (`each`) in waves: the shared Namespace, the other shared objects,
        the desired objects of the kinds in `apply_first` (what workloads need), then the rest at once. A
        wave with nothing to apply costs no round trip.
        """
        try:
            return self._sync(desired, selector=selector, managed_kinds=managed_kinds, namespace=namespace,
                              unlabelled=unlabelled, recheck_after=recheck_unlabelled_after, apply_first=apply_first)
        except ClusterError:
            self._shared_checked.clear()  # a deleted namespace, say: the next pass reads them all again
            raise

    def _shared_is_known(self, ref: ObjectRef, canonical: str, recheck_after: float) -> bool:
        checked = self._shared_checked.get(ref)
        return checked is not None and checked[0] == canonical and time.monotonic() - checked[1] < recheck_after

    def _sync(self, desired: Iterable[dict], *, selector: str, managed_kinds: Iterable[tuple[str, str]],
              namespace: str | None, unlabelled: Iterable[dict], recheck_after: float,
              apply_first: Collection[str]) -> SyncResult:
        result = SyncResult()
        wanted = {ObjectRef.of(obj): obj for obj in desired}
        wanted_kinds = {(r.api_version, r.kind) for r in wanted}
        live: dict[ObjectRef, dict] = {}
        for api_version, kind in sorted(set(managed_kinds) | wanted_kinds):
            try:
                items = self.list(api_version, kind, namespace=namespace, label_selector=selector, cached=True)
            except KindNotServed:
                if (api_version, kind) in wanted_kinds:
                    raise
                continue  # nothing of ours can exist in a kind the cluster does not serve
            for item in items:
                meta = item["metadata"]
                ref = ObjectRef(api_version, kind, meta.get("namespace") or "", meta["name"])
                live[ref] = item
        shared = []
        for obj in unlabelled:
            ref = ObjectRef.of(obj)
            canonical = json.dumps(obj, sort_keys=True)
            if recheck_after > 0 and self._shared_is_known(ref, canonical, recheck_after):
                result.unchanged.append(ref)
            else:
                shared.append((ref, obj, canonical))
        for ref, _obj, _canonical in shared:
            self.resource(ref.api_version, ref.kind)  # discovery before the threads
        for wave in waves(shared, {"Namespace"}):  # the rest lives in the Namespace
            for (ref, _obj, canonical), outcome in zip(wave, self.each(
                    lambda x: self._converge(x[0], x[1], self.get(x[0])), wave), strict=True):
                self._record(result, ref, outcome)
                self._shared_checked[ref] = (canonical, time.monotonic())
        for wave in waves(list(wanted.items()), apply_first):
            for (ref, _), outcome in zip(wave, self.each(lambda x: self._converge(x[0], x[1], live.get(x[0])), wave),
                                         strict=True):
                self._record(result, ref, outcome)
        for ref in sorted(set(live) - set(wanted), key=str):  # prune what is no longer desired
            if live[ref]["metadata"].get("deletionTimestamp"):
                continue
            if self.delete(ref):
                result.pruned.append(ref)
        return result

    def _converge(self, ref: ObjectRef, desired: dict, current: dict | None) -> tuple[dict, bool, str | None]:
        """Apply one object when missing or drifted, else leave it alone: (live object, applied, drift diff)."""
        if current is not None and is_subset(desired, current):
            return current, False, None
        diff = drift_diff(ref, desired, current) if current is not None else None
        return self.apply(desired), True, diff

    @staticmethod
    def _record(result: SyncResult, ref: ObjectRef, outcome: tuple[dict, bool, str | None]) -> None:
        result.live[ref], applied, diff = outcome
        (result.applied if applied else result.unchanged).append(ref)
        if diff is not None:
            result.drift[ref] = diff

    def each(self, fn, items: list) -> list:
        """`fn(item)` for every item, up to KUBE_PARALLEL_REQUESTS at once on this client's threads (a pass's
        applies pipelined instead of one round trip after another), each under the caller's pass deadline;
        the results in the items' order, the first error raised once all have ended."""
        if len(items) <= 1 or self.parallel <= 1:
            return [fn(item) for item in items]
        at = getattr(self._deadline, "at", None)

        def run(item):
            self._deadline.at = at
            try:
                return fn(item)
            finally:
                self._deadline.at = None

        with _clients_lock:
            if self._pool_pid != os.getpid():  # first use, or a forked child (threads do not follow a fork)
                self._pool, self._pool_pid = ThreadPoolExecutor(self.parallel, thread_name_prefix="kube"), os.getpid()
        futures = [self._pool.submit(run, item) for item in items]
        wait(futures)
        return [future.result() for future in futures]


def waves(items: list[tuple], first: Collection[str]) -> list[list[tuple]]:
    """(ObjectRef, ...) items in the waves a pass applies them in: those of the kinds in `first`, then the
    rest side by side; no empty wave (one round trip where nothing has to go first)."""
    return [w for w in ([x for x in items if x[0].kind in first], [x for x in items if x[0].kind not in first]) if w]


_clients: dict[tuple[int, str], Kube] = {}
_clients_lock = threading.Lock()


def kube_for(cluster) -> Kube:
    """The process's client for a cluster row (reconcile, inventory and telemetry share it), rebuilt when
    the row changes (new credentials). Its connection pool fits the scraper's thread pool."""
    key = (cluster.pk, cluster.updated.isoformat())
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            for stale in [k for k in _clients if k[0] == cluster.pk]:
                _clients.pop(stale).close()
            pool_size = max(settings.TELEMETRY_SCRAPE_CONCURRENCY, 4)
            client = _clients[key] = Kube(cluster.credentials(), pool_size=pool_size)
        return client


def close_all() -> None:  # every client of this process, their watch caches too
    with _clients_lock:
        clients, _ = list(_clients.values()), _clients.clear()
    for client in clients:
        client.close()
