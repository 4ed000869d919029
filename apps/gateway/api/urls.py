from django.urls import path
from rest_framework.routers import SimpleRouter

from apps.gateway.api import usage, views

router = SimpleRouter()
router.register("inference-keys", views.InferenceKeyViewSet)
router.register("tenant-limits", views.TenantLimitsViewSet)
urlpatterns = [path("usage/", usage.UsageView.as_view(), name="usage"), *router.urls]
