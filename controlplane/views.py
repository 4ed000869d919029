"""Project-level views that belong to no domain: the health check."""

from django.db import connection
from django.http import JsonResponse


def healthz(request):
    """200 when the database answers, 503 otherwise (used by container healthchecks)."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # any database failure means unhealthy
        return JsonResponse({"status": "unhealthy", "database": type(exc).__name__}, status=503)
    return JsonResponse({"status": "ok"})
