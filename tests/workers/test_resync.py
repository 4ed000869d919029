"""Which services the periodic resync picks up (the rule that keeps duplicates from piling up)."""

from datetime import timedelta
from itertools import pairwise

from django.utils import timezone

from apps.serving.models import InferenceService
from tests.factories import InferenceServiceFactory
from workers.reconcile import due_for_resync


def test_resync_takes_the_never_seen_the_stale_and_the_behind_but_not_what_is_in_flight(db, settings):
    settings.RESYNC_TICK_SECONDS = 10
    settings.RECONCILE_RESYNC_SECONDS = 30
    now = timezone.now()

    def make(name, checked_seconds_ago, behind=False, created_seconds_ago=600):
        svc = InferenceServiceFactory(name=name)
        InferenceService.objects.filter(pk=svc.pk).update(
            generation=2, observed_generation=1 if behind else 2, created=now - timedelta(seconds=created_seconds_ago),
            last_reconciled_at=None if checked_seconds_ago is None else now - timedelta(seconds=checked_seconds_ago))
        return name

    make("never", None)
    make("never-but-just-created", None, created_seconds_ago=20)  # its on-save task is still queued
    make("stale", 31)
    # Checked late in the tick before last: one interval old by the time this tick's spread reaches it.
    make("a-tick-short-of-stale", 21)
    make("fresh", 19)
    make("behind-idle", 15, behind=True)
    make("behind-in-flight", 5, behind=True)
    due = set(due_for_resync(now).values_list("name", flat=True))
    assert due == {"never", "stale", "a-tick-short-of-stale", "behind-idle"}


def test_a_tick_sends_work_that_is_behind_now_and_spreads_drift_checks_over_the_tick():
    from workers.tasks.reconcile import spread

    # Services 1-4 are up to date (drift checks, oldest first), 5 is behind its spec; a tick of 10 s.
    plan = dict(spread([(1, False), (2, False), (5, True), (3, False), (4, False)], tick_seconds=10, share=10))
    assert plan[5] == 0.0
    # Four checks over 90% of the tick: 0, 2.25, 4.5 and 6.75 s.
    assert sorted(plan[pk] for pk in (1, 2, 3, 4)) == [0.0, 2.25, 4.5, 6.75]
    assert len(plan) == 5


def test_a_tick_starts_at_most_its_share_of_drift_checks_oldest_first():
    from workers.tasks.reconcile import spread, tick_share

    # 2,000 services checked every 30 s, a tick every 10 s: 667 a tick (rounded up).
    assert tick_share(2000, 10, 30) == 667
    due = [(pk, False) for pk in range(1, 2001)] + [(9999, True)]
    plan = spread(due, tick_seconds=10, share=667)
    assert [pk for pk, _ in plan][:2] == [9999, 1]  # behind first, then the oldest check
    assert len(plan) == 668 and plan[-1][0] == 667
    assert plan[-1][1] < 9.0  # the last check starts within 90% of the tick


def test_looks_at_a_deploying_service_come_less_often_the_longer_it_takes():
    from workers.tasks.reconcile import requeue_delay

    # 3 s, then x1.5 per look that found it still deploying, capped at 15 s.
    assert [requeue_delay(3.0, waits) for waits in range(6)] == [3.0, 4.5, 6.75, 10.125, 15.0, 15.0]
    assert requeue_delay(15.0, 0) == 15.0  # a failing service's own pace is kept


def test_drift_checks_only_top_the_backlog_up_to_one_ticks_share():
    from workers.tasks.reconcile import tick_share

    # 667 a tick at 2,000 services; 600 passes already in flight (a rollout's looks, new services) leave 67.
    assert tick_share(2000, 10, 30, in_flight=600) == 67
    # A backlog larger than a tick's share starts no drift check at all: the interval stretches instead.
    assert tick_share(2000, 10, 30, in_flight=5000) == 0
    assert tick_share(3, 10, 30, in_flight=0) == 1


def test_a_fleet_that_converged_in_one_tick_is_checked_evenly_from_the_next_interval_on(db, settings):
    """Ticks at a simulated clock over real rows: each tick's planned checks run at their countdowns
    (a pass taking 0.2 s), and the next tick plans from what they left in the table."""
    from workers.tasks.reconcile import tick_plan

    settings.RESYNC_TICK_SECONDS = 10
    settings.RECONCILE_RESYNC_SECONDS = 30
    start = timezone.now()
    services = InferenceServiceFactory.create_batch(60)
    # 60 services that all converged within the same two seconds (a fleet created at once).
    for i, svc in enumerate(services):
        InferenceService.objects.filter(pk=svc.pk).update(
            generation=1, observed_generation=1, created=start - timedelta(hours=1),
            last_reconciled_at=start + timedelta(seconds=2 * i / 60))
    checked_at: dict[int, list[float]] = {svc.pk: [] for svc in services}
    per_tick = []
    for tick in range(1, 13):  # four intervals
        now = start + timedelta(seconds=10 * tick)
        plan = tick_plan(now)
        per_tick.append(len(plan))
        for pk, countdown in plan:
            done = 10 * tick + countdown + 0.2
            checked_at[pk].append(done)
            InferenceService.objects.filter(pk=pk).update(last_reconciled_at=start + timedelta(seconds=done))
    # The first interval spreads the cohort over three ticks; from then on every tick checks its fair share
    # (60 services x 10 s / 30 s) and no more.
    assert per_tick[:3] == [0, 0, 20]  # nobody is due before the cohort's checks are one interval old
    assert per_tick[3:] == [20] * 9
    gaps = [b - a for times in checked_at.values() for a, b in pairwise(times)]
    assert len(gaps) >= 60 and min(gaps) >= 29 and max(gaps) <= 31  # each service once per interval
