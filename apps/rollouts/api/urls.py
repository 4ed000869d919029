from django.urls import path, re_path

from apps.rollouts.actions import ACTIONS
from apps.rollouts.api import views

urlpatterns = [
    path("services/<int:pk>/rollouts/", views.ServiceRolloutsView.as_view(), name="service-rollouts"),
    re_path(rf"^services/(?P<pk>[0-9]+)/rollout/(?P<action>{'|'.join(ACTIONS)})/$", views.RolloutActionView.as_view(),
            name="service-rollout-action"),
]
