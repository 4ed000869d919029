from rest_framework.routers import SimpleRouter

from apps.serving.api import views

router = SimpleRouter()
router.register("services", views.InferenceServiceViewSet)
urlpatterns = router.urls
