from django.urls import path

from apps.autoscaling import views

app_name = "autoscaling"

urlpatterns = [
    path("services/<int:pk>/scaling/", views.scaling_panel, name="panel"),
    path("scaling/decisions/", views.fleet_decisions, name="fleet-decisions"),
]
