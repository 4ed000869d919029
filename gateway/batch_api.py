"""OpenAI's `/v1/files` (purpose `batch`, JSONL) and `/v1/batches` at the gateway, for an authenticated key:
the rows are the key's tenant's, in PostgreSQL (gateway/batch_store.py, called off the event loop); the lines
are run by gateway/batch_runner.py. Bad input is a 400 naming the field; another tenant's id is a 404 like
an unknown one."""

from __future__ import annotations

import asyncio
import json
import re
from email import policy
from email.parser import BytesParser
from urllib.parse import parse_qs

from gateway import batch_store as store
from gateway import batch_vocab as bv
from gateway.batch_lines import checked_file
from gateway.errors import error_body
from gateway.metering import clean_text
from gateway.validation import ENDPOINTS, Invalid, parse

JSON = [(b"content-type", b"application/json")]
ID = f"({bv.ID_PATTERN})"
ROUTES = (("GET", re.compile(r"/v1/files"), "list_files"), ("POST", re.compile(r"/v1/files"), "upload"),
          ("GET", re.compile(f"/v1/files/{ID}"), "retrieve_file"),
          ("DELETE", re.compile(f"/v1/files/{ID}"), "delete_file"),
          ("GET", re.compile(f"/v1/files/{ID}/content"), "content"),
          ("GET", re.compile(r"/v1/batches"), "list_batches"), ("POST", re.compile(r"/v1/batches"), "create"),
          ("GET", re.compile(f"/v1/batches/{ID}"), "retrieve_batch"),
          ("POST", re.compile(f"/v1/batches/{ID}/cancel"), "cancel"))
PREFIXES = ("/v1/files", "/v1/batches")
MULTIPART_SLACK = 64 * 1024  # a multipart body's headers and boundaries around the file
BATCH_BODY_BYTES = 64 * 1024  # a batch's create body: ids, endpoint, window and metadata


def ok(payload: dict) -> tuple[int, list, bytes]:
    return 200, JSON, json.dumps(payload).encode()


def bad(message: str, param: str | None = None, status: int = 400, code: str | None = None):
    return status, JSON, error_body(status, message, param=param, code=code)


def not_found(what: str, ident: str):
    return bad(f"No such {what}: '{ident}'.", "id" if what == "File" else "batch_id", 404, "not_found")


class BatchApi:
    def __init__(self, database_url: str, read_body):
        self.database_url = database_url
        self.read_body = read_body  # gateway.app.read_body: the body, or None past a bound

    async def handle(self, scope, receive, key: dict, path: str, method: str):
        for verb, pattern, name in ROUTES:
            match = pattern.fullmatch(path)
            if match and verb == method:
                query = {k: v[-1] for k, v in parse_qs(scope.get("query_string", b"").decode("latin-1")).items()}
                return await getattr(self, name)(scope, receive, key, query, *match.groups())
        return bad(f"Unknown endpoint {method} {path}.", status=404, code="unknown_url")

    def _db(self, function, *args, **kwargs):
        # Every database call runs in a thread: the event loop keeps serving inference meanwhile.
        return asyncio.to_thread(function, self.database_url, *args, **kwargs)

    async def upload(self, scope, receive, key, query):
        body = await self.read_body(receive, bv.MAX_FILE_BYTES + MULTIPART_SLACK)
        if body is None:
            return bad(f"A file may hold at most {bv.MAX_FILE_BYTES} bytes.", "file", 413)
        content_type = dict(scope["headers"]).get(b"content-type", b"")
        try:
            # Parsing tens of megabytes is work for a thread too.
            fields = await asyncio.to_thread(form_fields, content_type, body)
            purpose, filename, content, lines = checked_upload(fields)
        except Invalid as exc:
            return bad(exc.message, exc.param)
        row = await self._db(store.insert_file, tenant_id=key["tenant_id"], key_id=key["id"], purpose=purpose,
                             filename=filename, content=content, lines=lines)
        return ok(store.file_object(row))

    async def list_files(self, scope, receive, key, query):
        try:
            after, limit, order = paging(query)
            purpose = query.get("purpose")
            where, params = (" AND purpose = %s", (purpose,)) if purpose else ("", ())
        except Invalid as exc:
            return bad(exc.message, exc.param)
        rows, more = await self._db(store.list_rows, store.FILES, store.FILE_FIELDS, key["tenant_id"], after=after,
                                    limit=limit, order=order, where=where, params=params)
        return page([store.file_object(r) for r in rows], more)

    async def retrieve_file(self, scope, receive, key, query, file_id):
        row = await self._db(store.get_file, key["tenant_id"], file_id)
        return ok(store.file_object(row)) if row else not_found("File", file_id)

    async def content(self, scope, receive, key, query, file_id):
        content = await self._db(store.file_content, key["tenant_id"], file_id)
        if content is None:
            return not_found("File", file_id)
        return 200, [(b"content-type", b"application/jsonl")], content

    async def delete_file(self, scope, receive, key, query, file_id):
        outcome = await self._db(store.delete_file, key["tenant_id"], file_id)
        if outcome == "missing":
            return not_found("File", file_id)
        if outcome == "in_use":
            return bad("The file is the input of a batch still running: cancel the batch or wait for it.",
                       "file_id", 409, "file_in_use")
        return ok({"id": file_id, "object": "file", "deleted": True})

    async def create(self, scope, receive, key, query):
        body = await self.read_body(receive, BATCH_BODY_BYTES)
        if body is None:
            return bad(f"The body is over {BATCH_BODY_BYTES} bytes.", status=413)
        try:
            request = parse(body)
            endpoint, file_id, metadata = checked_batch(request)
        except Invalid as exc:
            return bad(exc.message, exc.param)
        input_file = await self._db(store.get_file, key["tenant_id"], file_id)
        if input_file is None:
            return not_found("File", file_id)
        if input_file["purpose"] != bv.PURPOSE_INPUT or not input_file["lines"]:
            return bad(f"The input file must be a non-empty file uploaded with purpose '{bv.PURPOSE_INPUT}'.",
                       "input_file_id")
        row = await self._db(store.insert_batch, tenant_id=key["tenant_id"], key_id=key["id"], endpoint=endpoint,
                             input_file=input_file, metadata=metadata)
        return ok(store.batch_object(row))

    async def list_batches(self, scope, receive, key, query):
        try:
            after, limit, order = paging(query)
        except Invalid as exc:
            return bad(exc.message, exc.param)
        rows, more = await self._db(store.list_rows, store.BATCHES, "*", key["tenant_id"], after=after,
                                    limit=limit, order=order)
        return page([store.batch_object(r) for r in rows], more)

    async def retrieve_batch(self, scope, receive, key, query, batch_id):
        row = await self._db(store.get_batch, key["tenant_id"], batch_id)
        return ok(store.batch_object(row)) if row else not_found("Batch", batch_id)

    async def cancel(self, scope, receive, key, query, batch_id):
        row = await self._db(store.cancel_batch, key["tenant_id"], batch_id)
        return ok(store.batch_object(row)) if row else not_found("Batch", batch_id)


def page(data: list[dict], more: bool):
    return ok({"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
               "last_id": data[-1]["id"] if data else None, "has_more": more})


def paging(query: dict) -> tuple[str | None, int, str]:
    """OpenAI's list parameters: `after` (an id), `limit` (1 to LIST_LIMIT) and `order` (asc or desc)."""
    limit = query.get("limit", str(bv.LIST_LIMIT))
    if not limit.isdigit() or not 1 <= int(limit) <= bv.LIST_LIMIT:
        raise Invalid(f"'limit' must be an integer from 1 to {bv.LIST_LIMIT}.", "limit")
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise Invalid("'order' must be 'asc' or 'desc'.", "order")
    after = query.get("after") or None
    if after is not None and not re.fullmatch(bv.ID_PATTERN, after):
        raise Invalid("'after' must be an id from an earlier page.", "after")
    return after, int(limit), order


def form_fields(content_type: bytes, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    """A multipart/form-data body's fields: name → (filename, bytes)."""
    if not content_type.lower().startswith(b"multipart/form-data"):
        raise Invalid("Upload the file as multipart/form-data, with fields 'file' and 'purpose'.", "file")
    message = BytesParser(policy=policy.HTTP).parsebytes(b"content-type: " + content_type + b"\r\n\r\n" + body)
    if not message.is_multipart():
        raise Invalid("The multipart body could not be read.", "file")
    fields = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if isinstance(name, str):
            fields[name] = (part.get_filename(), part.get_payload(decode=True) or b"")
    return fields


def checked_upload(fields: dict) -> tuple[str, str, bytes, int]:
    """(purpose, filename, content, lines) of an upload: purpose `batch`, a file `checked_file` takes."""
    purpose = fields.get("purpose", (None, b""))[1].decode("utf-8", "replace")
    if purpose != bv.PURPOSE_INPUT:
        raise Invalid(f"'purpose' must be '{bv.PURPOSE_INPUT}': the gateway keeps files for batches only.",
                      "purpose")
    if "file" not in fields:
        raise Invalid("'file' is a required field.", "file")
    filename, content = fields["file"]
    return purpose, clean_text(filename or "file.jsonl", bv.MAX_FILENAME_CHARS), content, checked_file(content)


def checked_batch(request: dict) -> tuple[str, str, dict | None]:
    """(endpoint, input_file_id, metadata) of a create body, as OpenAI's API defines it."""
    file_id = request.get("input_file_id")
    if not isinstance(file_id, str) or not file_id:
        raise Invalid("'input_file_id' is a required string.", "input_file_id")
    if not re.fullmatch(bv.ID_PATTERN, file_id):
        raise Invalid("'input_file_id' is not a file's id.", "input_file_id")
    endpoint = request.get("endpoint")
    if endpoint not in ENDPOINTS:
        raise Invalid(f"'endpoint' must be one of {', '.join(ENDPOINTS)}.", "endpoint")
    if request.get("completion_window") != bv.COMPLETION_WINDOW:
        raise Invalid(f"'completion_window' must be '{bv.COMPLETION_WINDOW}'.", "completion_window")
    metadata = request.get("metadata")
    if metadata is not None and not (
            isinstance(metadata, dict) and len(metadata) <= bv.MAX_METADATA_PAIRS
            and all(isinstance(k, str) and len(k) <= bv.MAX_METADATA_KEY and isinstance(v, str)
                    and len(v) <= bv.MAX_METADATA_VALUE for k, v in metadata.items())):
        raise Invalid(f"'metadata' must be an object of at most {bv.MAX_METADATA_PAIRS} string pairs (keys of at "
                      f"most {bv.MAX_METADATA_KEY} characters, values of at most {bv.MAX_METADATA_VALUE}).",
                      "metadata")
    if metadata is not None:  # stored as jsonb, which takes no NUL or lone surrogate
        metadata = {clean_text(k, bv.MAX_METADATA_KEY): clean_text(v, bv.MAX_METADATA_VALUE)
                    for k, v in metadata.items()}
    return endpoint, file_id, metadata
