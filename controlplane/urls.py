"""Top-level URL map: admin, REST API v1, schema and docs, dashboard and portal."""

from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerSplitView

from apps.telemetry.views import metrics

urlpatterns = [
    path("", include("apps.web.urls")),
    # Browsers ask for /favicon.ico on pages without a <link rel="icon"> (API docs, JSON, errors).
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
    path("metrics", metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("apps.tenancy.api.urls")),
    path("api/v1/", include("apps.catalog.api.urls")),
    path("api/v1/", include("apps.clusters.api.urls")),
    path("api/v1/", include("apps.serving.api.urls")),
    path("api/v1/", include("apps.telemetry.api.urls")),
    path("api/v1/", include("apps.autoscaling.api.urls")),
    path("api/v1/", include("apps.rollouts.api.urls")),
    path("api/v1/", include("apps.gateway.api.urls")),
    path("api/v1/", include("apps.whatif.api.urls")),
    path("api/v1/", include("apps.core.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves its start-up script as a file, so the page runs no inline script (CSP).
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema", template_name="api/swagger_ui.html"),
         name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema", template_name="api/redoc.html"),
         name="api-redoc"),
]

handler404 = "controlplane.views.not_found"
