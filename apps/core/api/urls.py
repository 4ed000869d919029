from rest_framework.routers import SimpleRouter

from apps.core.api.audit import AuditEntryViewSet

router = SimpleRouter()
router.register("audit-entries", AuditEntryViewSet)
urlpatterns = router.urls
