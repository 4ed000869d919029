from rest_framework.routers import SimpleRouter

from apps.catalog.api import views

router = SimpleRouter()
router.register("models", views.ModelViewSet)
router.register("adapters", views.AdapterViewSet)
router.register("runtimes", views.RuntimeViewSet)
urlpatterns = router.urls
