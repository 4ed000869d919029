"""Which services the periodic resync picks up (the rule that keeps duplicates from piling up)."""

from datetime import timedelta

from django.utils import timezone

from apps.serving.models import InferenceService
from tests.factories import InferenceServiceFactory
from workers.reconcile import due_for_resync


def test_resync_takes_the_never_seen_the_stale_and_the_behind_but_not_what_is_in_flight(db, settings):
    settings.RESYNC_TICK_SECONDS = 10
    settings.RECONCILE_RESYNC_SECONDS = 30
    now = timezone.now()

    def make(name, checked_seconds_ago, behind=False):
        svc = InferenceServiceFactory(name=name)
        InferenceService.objects.filter(pk=svc.pk).update(
            generation=2, observed_generation=1 if behind else 2,
            last_reconciled_at=None if checked_seconds_ago is None else now - timedelta(seconds=checked_seconds_ago))
        return name

    make("never", None)
    make("stale", 31)
    make("fresh", 20)
    make("behind-idle", 15, behind=True)
    make("behind-in-flight", 5, behind=True)
    due = set(due_for_resync(now).values_list("name", flat=True))
    assert due == {"never", "stale", "behind-idle"}
