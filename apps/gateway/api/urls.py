from rest_framework.routers import SimpleRouter

from apps.gateway.api import views

router = SimpleRouter()
router.register("inference-keys", views.InferenceKeyViewSet)
router.register("tenant-limits", views.TenantLimitsViewSet)
urlpatterns = router.urls
