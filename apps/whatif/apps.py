from django.apps import AppConfig


class WhatifConfig(AppConfig):
    name = "apps.whatif"
    label = "whatif"
    verbose_name = "What-if lab"
