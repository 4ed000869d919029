from rest_framework.routers import SimpleRouter

from apps.clusters.api import views

router = SimpleRouter()
router.register("clusters", views.ClusterViewSet)
router.register("gpu-nodes", views.GpuNodeViewSet)
urlpatterns = router.urls
