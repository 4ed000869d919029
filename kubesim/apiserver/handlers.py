"""The Kubernetes REST handlers: discovery, routing of API paths to resources, the verbs, tables and watch.

`ApiHandlers(server)` serves every request the generic API router receives on behalf of a
`kubesim.apiserver.server.Server`, translating it into calls on the server's Store.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Protocol

import yaml
from aiohttp import web

from . import discovery, fieldvalidation, openapi, paging, tables
from .apply import PATCH_TYPES
from .errors import ApiError
from .resources import ResourceType
from .store import Store, Subscription

try:  # the C loader is much faster for apply bodies
    _YamlLoader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _YamlLoader = yaml.SafeLoader

JSON = "application/json"
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
# Kinds whose immediate deletion answers with the object rather than a Status (apiserver behaviour).
_DELETE_RETURNS_OBJECT = {("", "pods")}


def json_response(body, status: int = 200, content_type: str = JSON) -> web.Response:
    return web.Response(body=_dumps(body).encode(), status=status, headers={"Content-Type": content_type})


def status_response(err: ApiError) -> web.Response:
    return json_response(err.status(), err.code)


def _field_manager_from(request: web.Request) -> str:
    fm = request.query.get("fieldManager")
    if fm:
        return fm
    ua = request.headers.get("User-Agent", "")
    return ua.split("/", 1)[0] or "unknown"


def _dry_run(request: web.Request, body: dict | None = None) -> bool:
    values = request.query.getall("dryRun", [])
    if body and isinstance(body.get("dryRun"), list):
        values = [*values, *body["dryRun"]]
    for v in values:
        if v != "All":
            raise ApiError.bad_request(f'Invalid value: "{v}": supported values: "All"')
    return bool(values)


def _warned(response: web.Response, warnings: list[str]) -> web.Response:
    """Add one `Warning` header per text (unknown fields under fieldValidation=Warn)."""
    for text in warnings:
        response.headers.add("Warning", fieldvalidation.warning_header(text))
    return response


def _truthy(v: str | None) -> bool:
    return v is not None and v.lower() in ("true", "1")


class HandlerHost(Protocol):
    """What the handlers need of the server that mounts them (`kubesim.apiserver.server.Server`)."""

    store: Store
    host: str
    port: int
    bookmark_interval: float
    watch_coalesce: float


class ApiHandlers:
    """Handlers for discovery, OpenAPI and the resource REST API."""

    def __init__(self, server: HandlerHost):
        self.server = server
        self.store = server.store

    # ------------------------------------------------------------------ discovery

    async def version(self, request: web.Request) -> web.Response:
        return json_response(discovery.VERSION_INFO)

    async def ok(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def core_versions(self, request: web.Request) -> web.Response:
        if discovery.wants_aggregated(request.headers.get("Accept")):
            return json_response(discovery.aggregated(self.store.registry, core=True),
                                 content_type=discovery.AGGREGATED_V2)
        return json_response(discovery.api_versions(f"{self.server.host}:{self.server.port}"))

    async def groups(self, request: web.Request) -> web.Response:
        if discovery.wants_aggregated(request.headers.get("Accept")):
            return json_response(discovery.aggregated(self.store.registry, core=False),
                                 content_type=discovery.AGGREGATED_V2)
        return json_response(discovery.api_group_list(self.store.registry))

    async def openapi_v2(self, request: web.Request) -> web.Response:
        return web.Response(body=discovery.OPENAPI_V2_BYTES,
                            headers={"Content-Type": discovery.OPENAPI_V2_PROTOBUF})

    async def openapi_v3_index(self, request: web.Request) -> web.Response:
        return json_response(openapi.index(self.store))

    async def openapi_v3(self, request: web.Request) -> web.Response:
        parts = request.match_info["path"].strip("/").split("/")
        built = None
        if len(parts) == 2 and parts[0] == "api":
            built = openapi.document(self.store, "", parts[1])
        elif len(parts) == 3 and parts[0] == "apis":
            built = openapi.document(self.store, parts[1], parts[2])
        if built is None:
            raise ApiError.path_not_found()
        return web.Response(body=built[0], headers={"Content-Type": JSON})

    # ------------------------------------------------------------------ routing

    def _route(self, request: web.Request):
        """Split a resource path into (group, version, rest-of-path segments)."""
        parts = [p for p in request.path.split("/") if p]
        if parts[0] == "api":
            if len(parts) < 2 or parts[1] != "v1":
                raise ApiError.path_not_found()
            return "", "v1", parts[2:]
        if len(parts) < 3:
            if len(parts) == 2:
                return parts[1], None, []
            raise ApiError.path_not_found()
        return parts[1], parts[2], parts[3:]

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        group, version, rest = self._route(request)
        watch_path = False
        if rest and rest[0] == "watch":  # legacy /watch/ paths
            watch_path, rest = True, rest[1:]
        if version is None:
            doc = discovery.api_group(self.store.registry, group)
            if doc is None or request.method != "GET":
                raise ApiError.path_not_found()
            return json_response(doc)
        if not rest:
            doc = discovery.api_resource_list(self.store.registry, group, version)
            if doc is None or request.method != "GET":
                raise ApiError.path_not_found()
            return json_response(doc)
        reg = self.store.registry
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            candidate = reg.get(group, version, rest[2])
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        rt = reg.get(group, version, rest[0])
        if rt is None or len(rest) > 3:
            raise ApiError.path_not_found()
        if rt.namespaced is False and namespace is not None:
            raise ApiError.path_not_found()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and not ((sub == "status" and rt.status) or (sub == "scale" and rt.scale)
                                    or (sub == "finalize" and rt.key == ("", "v1", "namespaces"))):
            raise ApiError.path_not_found()
        method = request.method
        if name is None:
            if method == "GET":
                if watch_path or _truthy(request.query.get("watch")):
                    return await self._watch(request, rt, namespace)
                return self._list(request, rt, namespace)
            if method == "POST":
                return await self._create(request, rt, namespace)
            if method == "DELETE":
                return await self._delete_collection(request, rt, namespace)
            raise ApiError.method_not_allowed()
        if sub == "finalize" and method == "PUT":  # what the namespace controller calls once a namespace is empty
            body = await self._json_body(request)
            return json_response(self.store.finalize_namespace(
                name, ((body or {}).get("spec") or {}).get("finalizers") or []))
        if sub == "finalize":
            raise ApiError.method_not_allowed()
        if method == "GET":
            if watch_path:
                return await self._watch(request, rt, namespace, name=name)
            with self.store.raw_results():
                obj = self.store.get(rt, namespace, name, subresource=sub)
                if sub is None and tables.wants_table(request.headers.get("Accept")):
                    return self._table_response(request, rt, [obj], None)
                return json_response(obj)
        if method == "PUT":
            body = await self._json_body(request)
            warnings = fieldvalidation.check(self.store, rt, body, request.query.get("fieldValidation"),
                                             operation="update", subresource=sub)
            with self.store.raw_results():
                obj = self.store.update(rt, namespace, name, body, subresource=sub,
                                        field_manager=_field_manager_from(request), dry_run=_dry_run(request))
                return _warned(json_response(obj), warnings)
        if method == "PATCH":
            return await self._patch(request, rt, namespace, name, sub)
        if method == "DELETE" and sub is None:
            return await self._delete(request, rt, namespace, name)
        raise ApiError.method_not_allowed()

    # ------------------------------------------------------------------ verbs

    async def _json_body(self, request: web.Request):
        raw = await request.read()
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            try:  # the apiserver accepts YAML bodies too
                return yaml.load(raw, Loader=_YamlLoader)  # noqa: S506 - a safe loader
            except yaml.YAMLError as e:
                raise ApiError.bad_request(f"the body of the request could not be decoded: {e}") from None

    def _list(self, request: web.Request, rt: ResourceType, namespace: str | None) -> web.Response:
        q = request.query
        with self.store.raw_results():
            result = paging.page(self.store, rt, namespace, q.get("labelSelector"), q.get("fieldSelector"),
                                 paging.parse_limit(q.get("limit")), q.get("continue"))
        if tables.wants_table(request.headers.get("Accept")):
            return self._table_response(request, rt, result.items, result.resource_version, result.list_meta())
        return json_response({"kind": f"{rt.kind}List", "apiVersion": rt.api_version,
                              "metadata": result.list_meta(), "items": result.items})

    def _columns(self, rt: ResourceType) -> list:
        return tables.columns_for(rt, self.store.crd_of(rt) if rt.custom else None)

    def _table_response(self, request: web.Request, rt: ResourceType, items: list[dict], rv,
                        list_meta: dict | None = None) -> web.Response:
        body = tables.table(self._columns(rt), items, rv, request.query.get("includeObject", "Metadata"))
        if list_meta:
            body["metadata"] = list_meta
        return json_response(body, content_type=tables.TABLE_CONTENT_TYPE)

    async def _create(self, request: web.Request, rt: ResourceType, namespace: str | None) -> web.Response:
        body = await self._json_body(request)
        if not isinstance(body, dict):
            raise ApiError.bad_request("the body of the request must be a JSON object")
        warnings = fieldvalidation.check(self.store, rt, body, request.query.get("fieldValidation"),
                                         operation="create")
        with self.store.raw_results():
            obj = self.store.create(rt, namespace, body, field_manager=_field_manager_from(request),
                                    dry_run=_dry_run(request))
            return _warned(json_response(obj, 201), warnings)

    async def _patch(self, request: web.Request, rt: ResourceType, namespace, name: str, sub) -> web.Response:
        ctype = (request.headers.get("Content-Type") or "").split(";")[0].strip()
        patch_type = PATCH_TYPES.get(ctype)
        if patch_type is None:
            raise ApiError.unsupported_media_type(ctype)
        raw = await request.read()
        try:
            patch = json.loads(raw or b"null")
        except ValueError:
            if patch_type != "apply":
                raise ApiError.bad_request("error decoding patch: invalid JSON") from None
            try:  # apply bodies may be YAML; _YamlLoader is a safe loader
                patch = yaml.load(raw, Loader=_YamlLoader)  # noqa: S506
            except yaml.YAMLError as e:
                raise ApiError.bad_request(f"error decoding patch: {e}") from None
        warnings = []
        if patch_type != "json":
            warnings = fieldvalidation.check(self.store, rt, patch, request.query.get("fieldValidation"),
                                             operation="apply" if patch_type == "apply" else "patch", name=name,
                                             namespace=namespace, subresource=sub)
        fm = request.query.get("fieldManager")
        if patch_type != "apply":
            fm = fm or _field_manager_from(request)
        existed = patch_type != "apply" or self.store.exists(rt, namespace, name)
        with self.store.raw_results():
            obj = self.store.patch(rt, namespace, name, patch, patch_type, field_manager=fm,
                                   force=_truthy(request.query.get("force")), subresource=sub,
                                   dry_run=_dry_run(request))
        return _warned(json_response(obj, 200 if existed else 201), warnings)

    async def _delete_options(self, request: web.Request) -> dict:
        body = await self._json_body(request) if request.can_read_body else None
        opts = body if isinstance(body, dict) else {}
        policy = request.query.get("propagationPolicy") or opts.get("propagationPolicy")
        orphan = request.query.get("orphanDependents")
        if orphan is None and opts.get("orphanDependents") is not None:
            orphan = str(opts["orphanDependents"])
        if not policy and orphan is not None:
            policy = "Orphan" if _truthy(orphan) else "Background"
        return {"policy": policy, "preconditions": opts.get("preconditions"), "dry_run": _dry_run(request, opts),
                "legacy_cascade": orphan is not None and not _truthy(orphan)}

    async def _delete(self, request: web.Request, rt: ResourceType, namespace, name: str) -> web.Response:
        opts = await self._delete_options(request)
        obj, removed = self.store.delete(rt, namespace, name, propagation_policy=opts["policy"],
                                         preconditions=opts["preconditions"], dry_run=opts["dry_run"])
        if removed and not rt.custom and (rt.group, rt.plural) not in _DELETE_RETURNS_OBJECT:
            return json_response({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": rt.group, "kind": rt.plural,
                            "uid": obj["metadata"].get("uid")}})
        # 202 only for the legacy orphanDependents=false form while the deletion is still pending
        return json_response(obj, 202 if opts["legacy_cascade"] and not removed else 200)

    async def _delete_collection(self, request: web.Request, rt: ResourceType, namespace) -> web.Response:
        opts = await self._delete_options(request)
        items, _ = self.store.list(rt, namespace, request.query.get("labelSelector"),
                                   request.query.get("fieldSelector"))
        deleted = []
        for item in items:
            meta = item["metadata"]
            with contextlib.suppress(ApiError):
                obj, _ = self.store.delete(rt, meta.get("namespace"), meta["name"],
                                           propagation_policy=opts["policy"], dry_run=opts["dry_run"])
                deleted.append(obj)
        return json_response({"kind": f"{rt.kind}List", "apiVersion": rt.api_version,
                              "metadata": {"resourceVersion": str(self.store.resource_version)},
                              "items": deleted})

    # ------------------------------------------------------------------ watch

    async def _watch(self, request: web.Request, rt: ResourceType, namespace, name: str | None = None):
        q = request.query
        field_selector = q.get("fieldSelector")
        if name:
            field_selector = f"metadata.name={name}" + (f",{field_selector}" if field_selector else "")
        sub = Subscription(self.store, rt, namespace if rt.namespaced else None, q.get("labelSelector"),
                           field_selector)
        send_initial = q.get("sendInitialEvents")
        send_initial_flag = None if send_initial is None else _truthy(send_initial)
        bookmarks = _truthy(q.get("allowWatchBookmarks"))
        timeout = q.get("timeoutSeconds")
        deadline = time.monotonic() + float(timeout) if timeout else None
        as_table = tables.wants_table(request.headers.get("Accept"))
        line = self._line
        if as_table:
            columns, include, first = self._columns(rt), q.get("includeObject", "Metadata"), [True]

            def line(rt, type_, ev):
                if type_ not in ("ADDED", "MODIFIED", "DELETED"):
                    return ApiHandlers._line(rt, type_, ev)
                body = tables.table(columns, [ev.obj], include=include, with_columns=first[0])
                first[0] = False
                return _dumps({"type": type_, "object": body}).encode() + b"\n"

        response = web.StreamResponse(status=200, headers={
            "Content-Type": tables.TABLE_CONTENT_TYPE if as_table else JSON, "Cache-Control": "no-cache, private"})
        response.enable_chunked_encoding()
        try:
            initial = self.store.initial_events(sub, q.get("resourceVersion"), send_initial_flag)
        except ApiError as e:
            await response.prepare(request)
            await response.write(_dumps({"type": "ERROR", "object": e.status()}).encode() + b"\n")
            await response.write_eof()
            return response
        start_rv = self.store.resource_version
        self.store.subscribe_raw(sub)
        try:
            await response.prepare(request)
            if initial:
                await response.write(b"".join(line(rt, t, ev) for t, ev in initial))
            if send_initial_flag:
                await response.write(self._bookmark(rt, start_rv, initial_end=True))
            last_bookmark = time.monotonic()
            while True:
                wait = 1.0
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                    if wait <= 0:
                        break
                try:
                    if sub.queue.empty():
                        async with asyncio.timeout(wait):  # no task per wait, unlike wait_for
                            t, ev = await sub.queue.get()
                    else:
                        t, ev = sub.queue.get_nowait()
                except TimeoutError:
                    if request.transport is None or request.transport.is_closing():
                        break
                    if bookmarks and time.monotonic() - last_bookmark >= self.server.bookmark_interval:
                        await response.write(self._bookmark(rt, self.store.resource_version))
                        last_bookmark = time.monotonic()
                    continue
                chunk = [line(rt, t, ev)]
                if self.server.watch_coalesce:
                    # let events committed in the next moment share one write: fewer syscalls per watcher
                    await asyncio.sleep(self.server.watch_coalesce)
                while not sub.queue.empty():
                    t, ev = sub.queue.get_nowait()
                    chunk.append(line(rt, t, ev))
                await response.write(b"".join(chunk))
            await response.write_eof()
        except ConnectionResetError:
            pass  # the client went away
        finally:
            sub.close()
        return response

    @staticmethod
    def _line(rt: ResourceType, type_: str, ev) -> bytes:
        key = f"{type_} {rt.api_version}"
        line = ev.wire.get(key)
        if line is None:
            obj = ev.obj if ev.obj.get("apiVersion") == rt.api_version else {**ev.obj, "apiVersion": rt.api_version}
            line = ev.wire[key] = _dumps({"type": type_, "object": obj}).encode() + b"\n"
        return line

    @staticmethod
    def _bookmark(rt: ResourceType, rv: int, initial_end: bool = False) -> bytes:
        meta: dict = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return _dumps({"type": "BOOKMARK", "object": {"kind": rt.kind, "apiVersion": rt.api_version,
                                                      "metadata": meta}}).encode() + b"\n"
