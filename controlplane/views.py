"""Project-level views that belong to no domain: the 404 handler."""

from django.http import JsonResponse
from django.views.defaults import page_not_found


def not_found(request, exception=None):
    """404 for a URL no route matches: JSON under /api/ (as every API answer is), Django's page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    return page_not_found(request, exception)
