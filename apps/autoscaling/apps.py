from django.apps import AppConfig


class AutoscalingConfig(AppConfig):
    name = "apps.autoscaling"
    label = "autoscaling"
