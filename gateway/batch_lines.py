"""A batch file's lines as the runner reads them, and the lines of its output and error files, in OpenAI's
shapes. Pure: no I/O, so each rule is tested by hand."""

from __future__ import annotations

import json

from gateway import batch_vocab as bv
from gateway.validation import Invalid, parse


def split_lines(content: bytes) -> list[bytes]:
    """The file's lines, numbered from 1 by their place; a final newline ends the last line, not a new one."""
    lines = content.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [line.removesuffix(b"\r") for line in lines]


def checked_file(content: bytes) -> int:
    """How many lines an uploaded batch file holds, once it is a non-empty UTF-8 file of at most MAX_FILE_BYTES
    bytes and MAX_FILE_LINES lines; Invalid naming `file` otherwise. Its lines are checked one by one as they
    run: a bad one goes to the error file."""
    if len(content) > bv.MAX_FILE_BYTES:
        raise Invalid(f"A file may hold at most {bv.MAX_FILE_BYTES} bytes.", "file")
    if not content.strip():
        raise Invalid("The file is empty.", "file")
    try:
        content.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Invalid(f"The file is not UTF-8 (byte {exc.start}).", "file") from exc
    if (lines := len(split_lines(content))) > bv.MAX_FILE_LINES:
        raise Invalid(f"The file holds {lines} lines; a batch takes at most {bv.MAX_FILE_LINES}.", "file")
    return lines


def checked_line(raw: bytes, endpoint: str, seen: set[str]) -> tuple[str, dict]:
    """(custom_id, body) of a request line: {"custom_id", "method": "POST", "url": the batch's endpoint, "body"};
    Invalid naming the field otherwise. `seen` holds the custom ids of the lines before (each is unique)."""
    try:
        line = parse(raw)
    except Invalid as exc:
        raise Invalid(f"The line is not a JSON object: {exc.message}") from exc
    custom_id = line.get("custom_id")
    if not isinstance(custom_id, str) or not 0 < len(custom_id) <= bv.MAX_CUSTOM_ID_CHARS:
        raise Invalid(f"'custom_id' must be a string of 1 to {bv.MAX_CUSTOM_ID_CHARS} characters.", "custom_id")
    if custom_id in seen:
        raise Invalid(f"'custom_id' {custom_id!r} is used by an earlier line.", "custom_id")
    seen.add(custom_id)
    if line.get("method") != "POST":
        raise Invalid("'method' must be \"POST\".", "method")
    if line.get("url") != endpoint:
        raise Invalid(f"'url' must be the batch's endpoint, {endpoint}.", "url")
    body = line.get("body")
    if not isinstance(body, dict):
        raise Invalid("'body' must be a JSON object.", "body")
    if body.get("stream"):
        raise Invalid("A batch line is answered whole: 'body.stream' must not be true.", "body.stream")
    return custom_id, body


def custom_id_of(raw: bytes) -> str | None:
    """The custom_id of a line refused before its own was checked, where it has a usable one."""
    try:
        value = json.loads(raw).get("custom_id")
    except (ValueError, AttributeError, RecursionError):
        return None
    return value if isinstance(value, str) and len(value) <= bv.MAX_CUSTOM_ID_CHARS else None


def answered(custom_id: str, status: int, body: bytes) -> str:
    """The output (or error) file's line for a request the gateway answered with `status` and `body`."""
    try:
        payload = json.loads(body) if body else None
    except ValueError:
        payload = {"error": {"message": body.decode("utf-8", "replace")}}
    return json.dumps({"id": bv.new_id(bv.REQUEST_ID_PREFIX), "custom_id": custom_id,
                       "response": {"status_code": status, "request_id": bv.new_id(""), "body": payload},
                       "error": None})


def refused(custom_id: str | None, number: int, problem: Invalid) -> str:
    """The error file's line for line `number`, which is not a request the batch can send."""
    return json.dumps({"id": bv.new_id(bv.REQUEST_ID_PREFIX), "custom_id": custom_id, "response": None,
                       "error": {"code": "invalid_request", "message": problem.message, "param": problem.param,
                                 "line": number}})
