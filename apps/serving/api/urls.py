from django.urls import path
from rest_framework.routers import SimpleRouter

from apps.serving.api import capacity, model_caches, queues, views

router = SimpleRouter()
router.register("services", views.InferenceServiceViewSet)
router.register("priority-classes", queues.PriorityClassViewSet)
router.register("tenant-queues", queues.TenantQueueViewSet)
router.register("model-caches", model_caches.ModelCacheViewSet)
urlpatterns = [
    path("capacity/", capacity.CapacityView.as_view(), name="capacity"),
    path("capacity/suggestions/", capacity.CapacitySuggestionsView.as_view(), name="capacity-suggestions"),
    *router.urls,
]
