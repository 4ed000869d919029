from django.urls import path

from apps.autoscaling.api import views

urlpatterns = [
    path("services/<int:pk>/decisions/", views.ServiceDecisionsView.as_view(), name="service-decisions"),
]
