from django.urls import path
from rest_framework.routers import SimpleRouter

from apps.gateway.api import kv_reuse, usage, views

router = SimpleRouter()
router.register("inference-keys", views.InferenceKeyViewSet)
router.register("tenant-limits", views.TenantLimitsViewSet)
urlpatterns = [
    path("usage/", usage.UsageView.as_view(), name="usage"),
    path("services/<int:pk>/kv-reuse/", kv_reuse.ServiceKvReuseView.as_view(), name="service-kv-reuse"),
    *router.urls,
]
