"""Watch-fed caches of the objects the control plane manages: one list+watch per kind per worker process.

A steady reconcile pass reads its objects from here instead of asking the API server, so a pass that finds
nothing changed sends nothing. Each `KindCache` keeps every object of one kind that carries the managed-by
label (all namespaces), indexed by the service-uid label. A daemon thread lists the kind, then watches it
from the list's resourceVersion with bookmarks; a watch that ends is resumed from the last resourceVersion
seen, and one the server answers with 410 Gone (its history no longer reaches that far) is replaced by a
fresh list (in pages of `LIST_PAGE`, so that a worker never holds a whole kind's list at once). Each object
is kept as compact JSON compressed against a dictionary, the first object the cache stored (objects of a
kind are much alike: a 4 kB pod takes about 0.5 kB). Reads are answered only while the watch is connected,
and only once the cache has seen at least the resourceVersion the caller asks for (its own last write of
the kind: read-your-writes); otherwise the caller reads the wire (`read` returns None).

Reads no Django models and builds no clients: `workers.kube.Kube` hands each cache its own ApiClient (the
watches hold their connections for minutes, which would starve the pool of the pass's requests).
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import zlib

import urllib3
from kubernetes.watch.watch import iter_resp_lines

from apps.serving.names import MANAGED_SELECTOR, SERVICE_UID_LABEL

log = logging.getLogger(__name__)

WATCH_SECONDS = (240, 300)  # each watch asks the server to end it within this (jittered), then resumes
READ_TIMEOUT_SECONDS = 120.0  # silence longer than this (no event, no bookmark) ends a watch
CONNECT_TIMEOUT_SECONDS = 5.0
RETRY_CAP_SECONDS = 10.0
LIST_PAGE = 500  # objects per list request: a relist's transient memory is one page's, not the kind's
GIVE_UP_AFTER = 8  # failures in a row (about half a minute): the thread ends; the next read starts another
INDEX_LABEL = SERVICE_UID_LABEL
# Called from a watch thread with (kind label, service uid) when a watch reports an object of a service
# DELETED (not when a relist no longer finds it); set by `workers.restore.install` in worker processes.
on_deleted = None


class Packer:
    """Objects as compact JSON deflated against a preset dictionary: the first object packed (kept for the
    packer's life, so every object packed can be read). Deflate alone saves half; with a dictionary of one
    object of the same kind, about 90%."""

    LEVEL = 1  # about 150 us for a 4 kB pod, and within 30% of the size level 9 gives

    def __init__(self):
        self.zdict: bytes | None = None

    def pack(self, obj: dict) -> bytes:
        raw = json.dumps(obj, separators=(",", ":")).encode()
        if self.zdict is None:
            self.zdict = raw
        deflate = zlib.compressobj(self.LEVEL, zdict=self.zdict)
        return deflate.compress(raw) + deflate.flush()

    def unpack(self, packed: bytes) -> dict:
        inflate = zlib.decompressobj(zdict=self.zdict)
        return json.loads(inflate.decompress(packed) + inflate.flush())


class Expired(Exception):
    """The server no longer has the history the watch asked for (410 Gone): list again."""


class Refused(Exception):
    """401 or 403: these credentials may not list or watch the kind cluster-wide; the wire answers."""


def resource_version(value) -> int:
    """A resourceVersion as an integer (etcd's and kubesim's are); -1 when it is not one, so that a cache
    never claims to have seen it."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


class WriteLog:
    """The newest resourceVersion a client wrote per kind and service: what the kind's cache must have seen
    before it answers a read of that service's objects (read-your-writes). Per service, because a write of
    one service's objects must not hold up the reads of another's while the watch catches up: under load
    every pass of a process would wait on every other pass's writes. Once more than `keep` writes are
    remembered, those the caches have seen are dropped; if the caches are behind (or down) and too few go,
    the next sweep waits until the log has doubled, so a write never pays for a sweep that frees nothing."""

    def __init__(self, keep: int = 2048):
        self.keep = self._sweep_at = keep
        self._rv: dict[tuple[str, str, str], int] = {}
        self._lock = threading.Lock()

    def note(self, kind: tuple[str, str], written: dict, caches: dict[tuple[str, str], KindCache]) -> None:
        meta = written.get("metadata") or {}
        uid = (meta.get("labels") or {}).get(INDEX_LABEL)
        if uid is None:
            return  # the caches answer reads of one service's objects only: no read waits for this one
        key, rv = (*kind, uid), resource_version(meta.get("resourceVersion"))
        with self._lock:
            self._rv[key] = max(self._rv.get(key, 0), rv)
            if len(self._rv) > self._sweep_at:
                for old in [k for k, v in self._rv.items()
                            if (cache := caches.get(k[:2])) is not None and cache.live and cache.seen >= v]:
                    del self._rv[old]
                self._sweep_at = max(self.keep, 2 * len(self._rv))

    def needed(self, kind: tuple[str, str], uid: str) -> int:
        return self._rv.get((*kind, uid), 0)

    def __len__(self) -> int:
        return len(self._rv)


class KindCache:
    """Every managed object of one kind, kept current by list + watch in a daemon thread."""

    def __init__(self, api, path: str, label: str):
        self.api = api  # a kubernetes ApiClient of the cache's own
        self.path = path  # the kind's collection, all namespaces: /apis/apps/v1/deployments
        self.label = label  # for logs: "apps/v1 Deployment"
        self.pid = os.getpid()  # a forked child must not read a parent's cache (its thread did not follow)
        # (namespace, name) -> (service uid, the object packed): under a kB each instead of the tens of kB of
        # nested dicts, so that thousands of services' objects fit a worker process; unpacked when read.
        self._packer = Packer()
        self._objects: dict[tuple[str, str], tuple[str | None, bytes]] = {}
        self._index: dict[str, set[tuple[str, str]]] = {}  # service uid -> keys
        self._rv = 0  # newest resourceVersion seen (events and bookmarks)
        self._live = False  # the watch is connected and the objects are those of `_rv`
        self._ever_live = False
        self._refused = False
        self._cond = threading.Condition()
        self._stopped = threading.Event()
        self.watch_seconds = WATCH_SECONDS
        self.page = LIST_PAGE
        self._response = None
        self.lists = 0  # requests this cache made, for benchmarks and tests
        self.watches = 0
        self._thread = threading.Thread(target=self._run, name=f"watch {label}", daemon=True)

    def start(self) -> KindCache:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        response = self._response
        if response is not None:
            response.shutdown() if hasattr(response, "shutdown") else response.release_conn()
        with self._cond:
            self._live = False
            self._cond.notify_all()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    @property
    def refused(self) -> bool:  # 401/403: the kind is read from the wire from now on
        return self._refused

    @property
    def live(self) -> bool:
        return self._live

    @property
    def seen(self) -> int:
        return self._rv

    def read(self, namespace: str | None, uid: str, min_rv: int = 0, wait: float = 0.0) -> list[dict] | None:
        """Copies of the objects labelled with service `uid` (in `namespace` when given), or None when the
        cache cannot answer within `wait` seconds: not connected, or behind `min_rv`."""
        with self._cond:
            if (self._ever_live and not self._live) or self._stopped.is_set():
                return None  # the watch broke (or may not run): the wire answers, nobody waits for it
            if not self._cond.wait_for(lambda: (self._live and self._rv >= min_rv) or self._stopped.is_set(),
                                       timeout=wait) or not self._live:
                return None
            keys = self._index.get(uid, ())
            found = [self._objects[k][1] for k in sorted(keys) if namespace is None or k[0] == namespace]
        return [self._packer.unpack(raw) for raw in found]  # fresh objects: a caller may change them

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        failures = 0
        while not self._stopped.is_set():
            try:
                self._relist()
                failures = 0
                while not self._stopped.is_set():
                    self._watch()  # returns when the server ended the watch: resume from the last version
            except Expired:
                log.info("watch cache %s: history expired at %s; listing again", self.label, self._rv)
                continue
            except Refused as exc:
                log.warning("watch cache %s: %s; passes read this kind from the API server", self.label, exc)
                self._refused = True
                self.stop()
                return
            except Exception as exc:  # unreachable, 5xx, a cut connection: list again after a pause
                failures += 1
                log.info("watch cache %s: %s: %s; listing again", self.label, exc.__class__.__name__, exc)
                self._set_live(False)
                if failures >= GIVE_UP_AFTER:
                    self.stop()  # a cluster gone for good (or a test's) keeps no thread polling it
                    return
                self._stopped.wait(random.uniform(0, min(RETRY_CAP_SECONDS, 0.5 * 2**failures)))

    def _request(self, params: list[tuple[str, str]], read_timeout: float):
        method, url, headers, body, _ = self.api.param_serialize(
            "GET", self.path, query_params=params, header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"])
        response = self.api.call_api(method, url, header_params=headers, body=body,
                                     _request_timeout=(CONNECT_TIMEOUT_SECONDS, read_timeout))
        if response.status != 200:
            data = response.read()
            if response.status == 410:
                raise Expired()
            if response.status in (401, 403):
                raise Refused(f"HTTP {response.status}")
            raise RuntimeError(f"HTTP {response.status}: {data[:200]!r}")
        return response

    def _relist(self) -> None:
        """List the kind page by page (one consistent snapshot: every page at the first one's version; a
        continue token the server no longer honours is a 410, and the list starts over)."""
        self._set_live(False)
        with self._cond:
            self._objects.clear()
            self._index.clear()
        token = ""
        while True:
            self.lists += 1
            params = [("labelSelector", MANAGED_SELECTOR), ("limit", str(self.page))]
            if token:
                params.append(("continue", token))
            listed = json.loads(self._request(params, READ_TIMEOUT_SECONDS).read())
            meta = listed.get("metadata") or {}
            with self._cond:
                for item in listed.get("items") or []:
                    self._put(item)
                del listed  # one page of parsed objects at a time
                self._rv = resource_version(meta.get("resourceVersion"))
            token = meta.get("continue") or ""
            if not token:
                return

    def _watch(self) -> None:
        self.watches += 1
        params = [("watch", "true"), ("labelSelector", MANAGED_SELECTOR), ("resourceVersion", str(self._rv)),
                  ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(random.randint(*self.watch_seconds)))]
        try:
            response = self._request(params, READ_TIMEOUT_SECONDS)
        except urllib3.exceptions.ReadTimeoutError:
            return  # resume from the same version
        self._response = response.response
        self._set_live(True)
        try:
            for line in iter_resp_lines(response.response):
                if line:
                    self._apply(json.loads(line))
        except urllib3.exceptions.ReadTimeoutError:
            return  # quiet for too long: resume from the last version seen
        finally:
            self._response = None
            response.response.release_conn()

    def _apply(self, event: dict) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Expired()
            raise RuntimeError(f"watch error: {obj.get('message') or obj}")
        rv = resource_version((obj.get("metadata") or {}).get("resourceVersion"))
        with self._cond:
            if kind == "DELETED":
                self._drop(obj)
                uid = ((obj.get("metadata") or {}).get("labels") or {}).get(INDEX_LABEL)
                if uid and on_deleted is not None:
                    on_deleted(self.label, uid)
            elif kind in ("ADDED", "MODIFIED"):
                self._put(obj)
            self._rv = max(self._rv, rv)
            self._cond.notify_all()

    def _key(self, obj: dict) -> tuple[str, str]:
        meta = obj.get("metadata") or {}
        return meta.get("namespace") or "", meta["name"]

    def _put(self, obj: dict) -> None:
        key = self._key(obj)
        old = self._objects.get(key)
        if old is not None:
            self._unindex(key, old[0])
        meta = obj.get("metadata") or {}
        meta.pop("managedFields", None)  # often half an object's size, and no pass reads it
        uid = (meta.get("labels") or {}).get(INDEX_LABEL)
        self._objects[key] = (uid, self._packer.pack(obj))
        if uid:
            self._index.setdefault(uid, set()).add(key)

    def _drop(self, obj: dict) -> None:
        key = self._key(obj)
        old = self._objects.pop(key, None)
        if old is not None:
            self._unindex(key, old[0])

    def _unindex(self, key: tuple[str, str], uid: str | None) -> None:
        keys = self._index.get(uid)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._index[uid]

    def _set_live(self, live: bool) -> None:
        with self._cond:
            self._live = live
            self._ever_live = self._ever_live or live
            self._cond.notify_all()


def uid_of_selector(selector: str | None) -> str | None:
    """The service uid when `selector` is exactly `<service-uid label>=<uid>` (what the cache indexes)."""
    if not selector or "," in selector:
        return None
    key, sep, value = selector.partition("=")
    if not sep or value.startswith("=") or key.strip() != INDEX_LABEL:
        return None
    return value.strip()
