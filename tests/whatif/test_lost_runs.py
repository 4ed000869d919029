"""A run whose worker died stays `running` no longer than its allowance: max(10 min, 4 CPU budgets) after it
started it is marked failed, with the reason; a run within its allowance and finished runs are untouched."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from apps.whatif.models import Run, RunStatus
from apps.whatif.runs import fail_lost_runs
from tests.factories import InferenceServiceFactory


def test_only_runs_past_their_allowance_are_marked_lost(db, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="chat", pools=[])
    now = timezone.now()

    def run(status, started_s_ago, budget_s):
        return Run.objects.create(service=service, cpu_budget_s=budget_s, status=status,
                                  started_at=now - timedelta(seconds=started_s_ago))

    lost = run(RunStatus.RUNNING, 601, 60)  # allowance max(600, 240) = 600 s: past it
    long_budget = run(RunStatus.RUNNING, 1000, 300)  # allowance max(600, 1200) = 1,200 s: still within
    fresh = run(RunStatus.RUNNING, 30, 60)
    done = run(RunStatus.SUCCEEDED, 5000, 60)

    assert fail_lost_runs(now) == 1
    lost.refresh_from_db()
    assert lost.status == RunStatus.FAILED and lost.finished_at == now
    assert lost.message == "Lost: no result 600 s after it started (its worker stopped); start it again."
    assert [Run.objects.get(pk=r.pk).status for r in (long_budget, fresh, done)] == ["running", "running", "succeeded"]
    assert fail_lost_runs(now) == 0
