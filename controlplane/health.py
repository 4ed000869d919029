"""Liveness and readiness for orchestrators: `/healthz` (the process answers) and `/readyz` (the database
and the Celery broker are reachable).

Served by a middleware placed first, so a kubelet probe addressed to the pod IP is not refused by
ALLOWED_HOSTS, redirected to HTTPS or asked to log in. The answers carry no detail (no error names, no
versions, no host names): anyone who can reach the port may call them.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from kombu import Connection

log = logging.getLogger(__name__)

HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
BROKER_TIMEOUT_SECONDS = 2.0


def database_reachable() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:  # any database failure means not ready
        log.warning("readiness: the database is not reachable", exc_info=True)
        return False
    return True


def broker_reachable() -> bool:
    """True when a connection to the Celery broker can be opened within a couple of seconds."""
    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None) or {}
    try:
        with Connection(settings.CELERY_BROKER_URL, transport_options=options,
                        connect_timeout=BROKER_TIMEOUT_SECONDS) as conn:
            conn.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT_SECONDS)
    except Exception:  # any broker failure means not ready
        log.warning("readiness: the broker is not reachable", exc_info=True)
        return False
    return True


def readiness() -> dict[str, bool]:
    return {"database": database_reachable(), "broker": broker_reachable()}


class HealthMiddleware:
    """Answers GET/HEAD /healthz and /readyz before any other middleware; everything else passes."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path_info not in (HEALTH_PATH, READY_PATH):
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            return JsonResponse({"status": "method not allowed"}, status=405, headers={"Allow": "GET, HEAD"})
        if request.path_info == HEALTH_PATH:
            response = JsonResponse({"status": "ok"})
        elif all(readiness().values()):
            response = JsonResponse({"status": "ready"})
        else:
            response = JsonResponse({"status": "unavailable"}, status=503)
        response["Cache-Control"] = "no-store"
        return response
