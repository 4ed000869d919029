"""A canary service at revision 1, a change that makes revision 2, and metered requests for its windows."""

from __future__ import annotations

from datetime import timedelta

import pytest

from apps.gateway.models import UsageRow
from apps.rollouts.plan import desired_spec
from apps.serving.actions import save_service
from apps.serving.models import InferenceService
from apps.serving.rendering.spec import PoolSpec
from tests.factories import ClusterFactory, ModelFactory, RuntimeFactory

# Two judged steps (5 % then 50 %, a minute each), then the promotion; 100 requests a side at least.
CANARY = {"strategy": "canary", "min_requests": 100, "max_extensions": 2,
          "steps": [{"weight": 5, "min_duration_seconds": 60}, {"weight": 50, "min_duration_seconds": 60},
                    {"weight": 100}]}


@pytest.fixture
def canary_service(tenant_a, owner_a):
    service = InferenceService(tenant=tenant_a, name="chat", cluster=ClusterFactory(name="sim"),
                               model=ModelFactory(name="llama-8b"), runtime=RuntimeFactory(name="vllm-old", tag="v0.33.0"),
                               rollout=CANARY)
    service = save_service(service, pools=[PoolSpec("engine", replicas=2, max_replicas=4)], adapters=[],
                           actor=owner_a, via="api")
    desired_spec(service)  # the first reconcile: revision 1 is what the stable workloads run
    return service


@pytest.fixture
def new_runtime(canary_service, owner_a):
    """Change the runtime (revision 2) and let the reconciler see it: the rollout starts."""
    def change():
        service = InferenceService.objects.get(pk=canary_service.pk)
        service.runtime = RuntimeFactory(name="vllm-new", tag="v0.34.0")
        save_service(service, pools=[PoolSpec("engine", replicas=2, max_replicas=4)], adapters=[], actor=owner_a,
                     via="api")
        return desired_spec(service)
    return change


def chat_rolling_out(tenant, cluster, catalog, owner) -> InferenceService:
    """chat with a canary strategy (2 to 4 replicas), revision 2 (a new runtime) just started beside revision 1."""
    pools = [PoolSpec("engine", replicas=2, max_replicas=4)]
    service = save_service(InferenceService(tenant=tenant, name="chat", cluster=cluster, model=catalog["model"],
                                            runtime=catalog["runtime"], rollout=CANARY),
                           pools=pools, adapters=[], actor=owner, via="api")
    desired_spec(service)
    service = InferenceService.objects.get(pk=service.pk)
    service.runtime = RuntimeFactory(name="vllm-next", tag="v0.34.0")
    save_service(service, pools=pools, adapters=[], actor=owner, via="api")
    desired_spec(service)
    return service


def meter(service, start, *, canary_pod, ttfts_ms, stable_ttfts_ms, status=200):
    """One metered request per TTFT, a second apart from `start`, half to each side (as the gateway writes them)."""
    rows = []
    for side, pod, values in (("canary", canary_pod, ttfts_ms), ("stable", "chat-7d9f-abcde", stable_ttfts_ms)):
        for i, ttft in enumerate(values):
            rows.append(UsageRow(at=start + timedelta(seconds=0.1 * i), tenant_id=service.tenant_id,
                                 service_id=service.pk, model="llama-8b", pod=pod, status=status if side == "canary"
                                 else 200, ttft_ms=ttft, duration_ms=ttft + 50, prompt_tokens=100, completion_tokens=1))
    UsageRow.objects.bulk_create(rows)
