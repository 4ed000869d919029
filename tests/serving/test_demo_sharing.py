"""`make demo`'s GPU sharing: after seed_demo, the first admission pass puts initech's best-effort batch service on
L4s acme lends, and the chat load's first rise (the autoscaler taking acme's chat to 2 replicas) preempts one of them
to reclaim acme's quota. Worked by hand from the seed: acme 6 L4 nominal, globex 1 (lent to nobody), initech 0."""

from __future__ import annotations

import pytest

from apps.clusters.models import Cluster
from apps.core.choices import AuditVia
from apps.serving.actions import scale_pool
from apps.serving.admission import admit_cluster, after_scale_up
from apps.serving.models import InferenceService
from tests.serving.test_commands import seed


@pytest.fixture
def demo(db, classes, monkeypatch):  # classes: the seeded ones, made again after a flush
    monkeypatch.setenv("KUBESIM_URL", "http://127.0.0.1:16443")
    seed(password="demo-pass-123")
    return Cluster.objects.get(name="kubesim")


def admission(tenant: str, name: str) -> dict:
    return InferenceService.objects.get(tenant__slug=tenant, name=name).admission


def test_the_demo_borrows_idle_l4s_then_preempts_the_borrower_when_the_chat_scales_up(demo):
    admit_cluster(demo)
    # acme's chat holds 1 of its 6 L4; globex's serverless its own 1; initech's 5 batch replicas borrow acme's other 5.
    assert admission("initech", "batch-summaries")["reason"] == "Admitted on borrowed quota (5 L4 from acme)"
    assert admission("acme", "llama-8b-chat")["reason"] == "Admitted"
    assert admission("globex", "mistral-7b-serverless")["reason"] == "Admitted"

    chat = InferenceService.objects.get(tenant__slug="acme", name="llama-8b-chat")
    chat = scale_pool(chat, role="engine", replicas=2, actor=None, via=AuditVia.SYSTEM, by_autoscaler=True)
    words = after_scale_up(chat, "engine", 2)

    # The most recently admitted batch replica goes: production 1000 reclaims acme's nominal quota from best-effort 0.
    why = "preempted by acme/llama-8b-chat/engine-1 (production 1000 > best-effort 0) to reclaim acme's nominal quota"
    assert words == f"preempted initech/batch-summaries/engine-4 ({why})"
    batch = admission("initech", "batch-summaries")
    assert batch["state"] == "preempted" and batch["replicas"] == {"engine": 4}
    assert batch["reason"].startswith(f"P{why[1:]} at ")
    assert admission("acme", "llama-8b-chat")["replicas"] == {"engine": 2}
