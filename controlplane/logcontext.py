"""Who a log line is about: request id, tenant and service, carried in context variables and added to
every log record, so `LOG_FORMAT=json` lines can be joined across web and worker processes.

The web binds a request id per request (the caller's `X-Request-ID` when it is sane, else a new one,
echoed in the response); Celery tasks bind their task id; domain code binds tenant and service where
it knows them (`with bind(tenant=..., service=...)`).
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
import uuid
from contextvars import ContextVar

from django.core.signals import request_finished
from pythonjsonlogger.json import JsonFormatter

FIELDS = ("request_id", "tenant", "service")
_context: ContextVar[dict[str, str]] = ContextVar("log_context", default={})  # noqa: B039 (never mutated)
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
REQUEST_ID_HEADER = "X-Request-ID"
access_log = logging.getLogger("controlplane.access")


def current() -> dict[str, str]:
    return dict(_context.get())


@contextlib.contextmanager
def bind(**fields):
    """Add fields (None values are skipped) to every log record made inside the block."""
    token = _context.set(_context.get() | {k: str(v) for k, v in fields.items() if v is not None})
    try:
        yield
    finally:
        _context.reset(token)


def replace(**fields) -> None:
    """Set the bound fields outright (for hooks without a block, such as Celery's task signals)."""
    _context.set({k: str(v) for k, v in fields.items() if v is not None})


def update(**fields) -> None:
    """Add fields to the bound ones without a block (they last until the next `replace`)."""
    _context.set(_context.get() | {k: str(v) for k, v in fields.items() if v is not None})


class ContextFilter(logging.Filter):
    """Copies the bound fields onto each record (empty string when unknown), for any formatter."""

    def filter(self, record: logging.LogRecord) -> bool:
        bound = _context.get()
        for name in FIELDS:
            if not hasattr(record, name):
                setattr(record, name, bound.get(name, ""))
        return True


class JsonLogFormatter(JsonFormatter):
    """One JSON object per line: time, level, logger, message, request_id, tenant, service, process."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("timestamp", "time")
        kwargs.setdefault("rename_fields", {"levelname": "level", "name": "logger"})
        super().__init__("%(levelname)s %(name)s %(message)s %(process)d", *args, **kwargs)

    def add_fields(self, log_data, record, message_dict) -> None:
        super().add_fields(log_data, record, message_dict)
        for name in FIELDS:  # only what is known: an empty field says nothing
            value = getattr(record, name, "")
            if value:
                log_data[name] = value
            else:
                log_data.pop(name, None)


def request_id_from(header: str | None) -> str:
    """The caller's request id when it is a plain token, else a fresh one (never echo arbitrary input)."""
    if header and _REQUEST_ID.match(header):
        return header
    return uuid.uuid4().hex


class RequestContextMiddleware:
    """Binds a request id for each request (until it is finished), returns it in `X-Request-ID` and writes
    the access log line."""

    def __init__(self, get_response):
        self.get_response = get_response
        # Cleared when the response is finished, not when this middleware returns: Django logs a 4xx/5xx
        # after the middleware chain, and that line should carry the request id too.
        request_finished.connect(_clear, dispatch_uid="controlplane.logcontext.clear")

    def __call__(self, request):
        request_id = request_id_from(request.headers.get(REQUEST_ID_HEADER))
        request.request_id = request_id
        replace(request_id=request_id)
        started = time.monotonic()
        response = self.get_response(request)
        response[REQUEST_ID_HEADER] = request_id
        # The access log (gunicorn's own is off): one line per request, in LOG_FORMAT like every other.
        access_log.info("%s %s %s", request.method, request.path, response.status_code, extra={
            "method": request.method, "path": request.path, "status": response.status_code,
            "duration_ms": round((time.monotonic() - started) * 1000, 1)})
        return response


def _clear(**_) -> None:
    replace()


def logging_config(log_format: str, level: str) -> dict:
    """Django's LOGGING for `LOG_FORMAT` `text` (the default) or `json`."""
    if log_format not in ("text", "json"):
        raise ValueError(f"LOG_FORMAT={log_format!r} is not one of text, json.")
    formatters = {
        "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "controlplane.logcontext.JsonLogFormatter"},
    }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"context": {"()": "controlplane.logcontext.ContextFilter"}},
        "formatters": {log_format: formatters[log_format]},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": log_format,
                                 "filters": ["context"]}},
        "root": {"handlers": ["console"], "level": level},
    }
