"""What the reconciler renders for a service with a canary strategy: the stable revision, and beside it the new
revision's unit at the current step's weight while a rollout runs (apps/rollouts/units.py).

`desired_spec(service)` is called by the reconcile worker, which holds the service's claim, so it is also where a
rollout starts: a canary service whose newest revision differs from what its stable workloads run (a
`StableRevision`) gets a Rollout from that one to the newest. A rolling service, or one seen for the first time,
simply renders its newest revision and records it as stable. A newer revision during a rollout supersedes it
(aborted, and a rollout to the newest starts from the same stable revision). A deployment-mode change goes by
rolling update, as the two units would need different routers; it is recorded as a rollout in phase
`rolling_update` with the reason, so the Rollout panel and the API say why no canary ran.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from apps.rollouts.choices import ACTIVE_PHASES, DecisionAction, RolloutPhase
from apps.rollouts.models import Rollout, RolloutDecision, StableRevision
from apps.rollouts.units import with_canary
from apps.serving.models import InferenceService, Revision
from apps.serving.rendering.spec import ServiceSpec, spec_from_revision, spec_from_service
from apps.serving.revisions import same_pods
from apps.serving.rollout_spec import is_canary


def desired_spec(service: InferenceService) -> ServiceSpec:
    """The ServiceSpec to render now (see the module's docstring); starts or supersedes a rollout as needed."""
    spec = spec_from_service(service)
    latest = service.revisions.order_by("-number").first()
    if latest is None:
        return spec
    with transaction.atomic():
        rollout = _current_rollout(service, latest)
    if rollout is None:
        return spec
    stable = spec_from_revision(service, _spec_of(service, rollout.from_revision))
    if not rollout.active:
        # The newest revision was rolled back (or aborted) but the service could not be set back to the stable one
        # (its save was refused): the stable revision alone runs until the service changes again.
        return stable
    return with_canary(stable, spec, rollout.to_revision, rollout.weight, rollout.canary_replicas)


def _spec_of(service, number: int) -> dict | None:
    return Revision.objects.filter(service=service, number=number).values_list("spec", flat=True).first()


def _current_rollout(service: InferenceService, latest: Revision) -> Rollout | None:
    """The active rollout to the newest revision (started here when due), the rolled-back rollout of the newest
    revision, or None when the newest revision alone is to run."""
    active = Rollout.objects.select_for_update().filter(service=service, phase__in=ACTIVE_PHASES).first()
    if active is not None and active.to_revision == latest.number:
        return active
    rolled_back = Rollout.objects.filter(service=service, to_revision=latest.number,
                                         phase__in=(RolloutPhase.ROLLED_BACK, RolloutPhase.ABORTED)).first()
    if rolled_back is not None:
        return rolled_back
    stable = StableRevision.objects.select_for_update().filter(service=service).first()
    if active is not None:
        _finish(active, RolloutPhase.ABORTED, DecisionAction.ABORT,
                f"Superseded by revision {latest.number}, saved while revision {active.to_revision} was rolling out.")
    if stable is None:
        StableRevision.objects.create(service=service, revision=latest.number)
        return None
    if stable.revision == latest.number:
        return None
    stable_spec = _spec_of(service, stable.revision)
    if not is_canary(service.rollout) or stable_spec is None or same_pods(stable_spec, latest.spec):
        stable.revision = latest.number
        stable.save(update_fields=["revision", "updated"])
        return None
    now = timezone.now()
    if stable_spec["deployment_mode"] != latest.spec["deployment_mode"]:
        _rolled_instead(service, stable, latest, stable_spec["deployment_mode"], now)
        return None
    rollout = Rollout.objects.create(service=service, from_revision=stable.revision, to_revision=latest.number,
                                     strategy=service.rollout, step_started_at=now, window_started_at=now)
    first = rollout.steps[0]
    RolloutDecision.objects.create(
        rollout=rollout, service=service, time=now, step=0, weight=first["weight"], action=DecisionAction.START,
        reason=f"Revision {latest.number} starts beside revision {stable.revision} with {first['weight']} % of the "
               f"requests.")
    return rollout


def _rolled_instead(service: InferenceService, stable: StableRevision, latest: Revision, mode: str, now) -> None:
    """A deployment-mode change under the canary strategy: the two revisions would need different routers (and a
    P/D or multi-node unit cannot share one with a single pool), so the new revision replaces the stable one by
    rolling update, recorded as a rollout that says so."""
    reason = (f"The deployment mode changed ({mode} → {latest.spec['deployment_mode']}): the two revisions cannot run "
              f"side by side behind one router, so revision {latest.number} replaces revision {stable.revision} by "
              f"rolling update, without canary steps or analysis.")
    rollout = Rollout.objects.create(service=service, from_revision=stable.revision, to_revision=latest.number,
                                     strategy=service.rollout, phase=RolloutPhase.ROLLING_UPDATE, step_started_at=now,
                                     window_started_at=now, reason=reason, finished_at=now)
    RolloutDecision.objects.create(rollout=rollout, service=service, time=now, step=0, weight=100,
                                   action=DecisionAction.ROLLING_UPDATE, reason=reason)
    stable.revision = latest.number
    stable.save(update_fields=["revision", "updated"])


def _finish(rollout: Rollout, phase: str, action: str, reason: str, *, actor=None, actor_label: str = "") -> None:
    """End a rollout (promoted, rolled back or aborted) and record why."""
    now = timezone.now()
    RolloutDecision.objects.create(rollout=rollout, service_id=rollout.service_id, time=now, step=rollout.step,
                                   weight=rollout.weight, action=action, reason=reason, actor=actor,
                                   actor_repr=actor.get_username() if actor else actor_label)
    rollout.phase, rollout.reason, rollout.finished_at = phase, reason, now
    rollout.save(update_fields=["phase", "reason", "finished_at"])
