"""Project-level views that belong to no domain: the health check and the 404 handler."""

from django.db import connection
from django.http import JsonResponse
from django.views.defaults import page_not_found


def healthz(request):
    """200 when the database answers, 503 otherwise (used by container healthchecks)."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # any database failure means unhealthy
        return JsonResponse({"status": "unhealthy", "database": type(exc).__name__}, status=503)
    return JsonResponse({"status": "ok"})


def not_found(request, exception=None):
    """404 for a URL no route matches: JSON under /api/ (as every API answer is), Django's page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    return page_not_found(request, exception)
