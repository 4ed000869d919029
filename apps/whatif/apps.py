from django.apps import AppConfig


class WhatifConfig(AppConfig):
    name = "apps.whatif"
    label = "whatif"
    verbose_name = "What-if lab"

    def ready(self) -> None:
        # The autoscaler's decisions quote the lab's latest search where a pool's maximum binds; the autoscaler
        # sits below the lab in the apps' layers, so the lab hands it the answer (apps/autoscaling/binds.py).
        from apps.autoscaling.binds import answer_with
        from apps.whatif.limits import search_answer

        answer_with(search_answer)
