from django.urls import path

from apps.telemetry.api import views

urlpatterns = [
    path("services/<int:pk>/metrics/", views.ServiceMetricsView.as_view(), name="service-metrics"),
]
