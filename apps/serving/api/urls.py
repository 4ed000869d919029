from django.urls import path
from rest_framework.routers import SimpleRouter

from apps.serving.api import capacity, views

router = SimpleRouter()
router.register("services", views.InferenceServiceViewSet)
urlpatterns = [
    path("capacity/", capacity.CapacityView.as_view(), name="capacity"),
    path("capacity/suggestions/", capacity.CapacitySuggestionsView.as_view(), name="capacity-suggestions"),
    *router.urls,
]
