"""The scrape's surge check (workers/surge.py): the builtin services whose figures of this scrape stepped up."""

from __future__ import annotations

from apps.autoscaling.models import PoolAutoscalerState
from apps.telemetry.models import SERVICE_ROLE
from tests.autoscaling.steps import scraped as figures
from tests.factories import InferenceServiceFactory
from workers.surge import surging

BUILTIN = {"autoscaler": "builtin", "targets": {"waiting_requests_per_replica": 4}}


def service(tenant, level, autoscaling=BUILTIN):
    made = InferenceServiceFactory(tenant=tenant, autoscaling=dict(autoscaling))
    if level is not None:  # "none": a state whose forecast has no level yet
        forecast = {} if level == "none" else {"level": level}
        PoolAutoscalerState.objects.create(service=made, pool="engine", history={"forecast": forecast})
    return made


def test_services_whose_load_stepped_up_or_whose_prompts_wait_are_checked(tenant_a):
    # Smoothed load 1,000 prompt tokens/s: 2,000 is a step (twice), 1,999 is not; 1,001 prompt tokens waiting
    # (more than a second of the load) is, 1,000 is not.
    stepped, calm = service(tenant_a, 1000.0), service(tenant_a, 1000.0)
    waiting, short = service(tenant_a, 1000.0), service(tenant_a, 1000.0)
    # Evaluated (activated) but no load measured yet: any prompt waiting counts, a rate alone cannot.
    unmeasured, idle = service(tenant_a, "none"), service(tenant_a, "none")
    never = service(tenant_a, None)  # never evaluated: the periodic evaluation comes first
    hpa = service(tenant_a, 1000.0, {"autoscaler": "hpa", "targets": {"kv_cache_usage": 0.8}})
    groups = {(stepped.pk, SERVICE_ROLE): figures(2000.0), (calm.pk, SERVICE_ROLE): figures(1999.0),
              (waiting.pk, SERVICE_ROLE): figures(500.0, waiting_tokens=1001.0),
              (short.pk, SERVICE_ROLE): figures(500.0, waiting_tokens=1000.0),
              (unmeasured.pk, SERVICE_ROLE): figures(0.0, waiting_tokens=1.0),
              (idle.pk, SERVICE_ROLE): figures(1e6),
              (never.pk, SERVICE_ROLE): figures(1e6, waiting_tokens=1e6), (hpa.pk, SERVICE_ROLE): figures(1e6),
              (calm.pk, "engine"): figures(1e6)}  # a pool's own row is not the service's
    assert surging(groups) == sorted([stepped.pk, waiting.pk, unmeasured.pk])
