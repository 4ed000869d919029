from django.urls import path
from rest_framework.routers import SimpleRouter

from apps.serving.api import capacity, queues, views

router = SimpleRouter()
router.register("services", views.InferenceServiceViewSet)
router.register("priority-classes", queues.PriorityClassViewSet)
router.register("tenant-queues", queues.TenantQueueViewSet)
urlpatterns = [
    path("capacity/", capacity.CapacityView.as_view(), name="capacity"),
    path("capacity/suggestions/", capacity.CapacitySuggestionsView.as_view(), name="capacity-suggestions"),
    *router.urls,
]
