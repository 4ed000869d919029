"""`{% sleep_state service as sleep %}`: what a serverless service does when idle, whether it sleeps now and how
long it takes to wake (portal/partials/sleep_state.html). None for a service that deletes when idle."""

from __future__ import annotations

from django import template

from apps.autoscaling.sleeping import asleep_since, wake_facts
from apps.serving.choices import DeploymentMode
from apps.serving.idle_spec import WhenIdle, idle_spec
from capacity.sleep import wake_seconds, wake_words

register = template.Library()


@register.simple_tag
def sleep_state(service) -> dict | None:
    spec = idle_spec(service.autoscaling)
    if service.deployment_mode != DeploymentMode.SERVERLESS or not spec.may_sleep:
        return None
    pool = next(iter(service.pools.all()), None)
    if pool is None:
        return None
    facts = wake_facts(service, pool)
    since = asleep_since(service, pool.role)
    return {"policy": WhenIdle(spec.when_idle).label, "level": spec.sleep_level, "since": since,
            "objective_s": spec.wake_objective_s, "wake_s": wake_seconds(spec.sleep_level, facts),
            "wake_words": wake_words(spec.sleep_level, facts), "gpus": pool.gpus_per_replica * pool.nodes_per_replica}
