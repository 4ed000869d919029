"""`/metrics`: the control plane's own metrics for Prometheus (see exporter.py).

Open to staff sessions, and to requests bearing `Authorization: Bearer $METRICS_TOKEN` when that
setting is non-empty; everyone else gets 403, so the fleet's shape is not public.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from apps.telemetry.exporter import exposition


def _allowed(request) -> bool:
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated and user.is_staff:
        return True
    token = settings.METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    return bool(token) and hmac.compare_digest(header.encode(), f"Bearer {token}".encode())


@require_GET
def metrics(request):
    if not _allowed(request):
        return HttpResponse("Staff session or the metrics bearer token required.\n", status=403,
                            content_type="text/plain")
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)
