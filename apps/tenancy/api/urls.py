from rest_framework.routers import SimpleRouter

from apps.tenancy.api import views

router = SimpleRouter()
router.register("tenants", views.TenantViewSet)
router.register("memberships", views.MembershipViewSet)
router.register("tokens", views.ApiTokenViewSet)
urlpatterns = router.urls
