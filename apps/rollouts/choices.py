"""Vocabularies of rollouts: where a rollout stands, and what a decision did."""

from django.db import models


class RolloutPhase(models.TextChoices):
    RUNNING = "running", "Running"
    PAUSED = "paused", "Paused"  # by a person, or held by the analysis until a person acts
    PROMOTED = "promoted", "Promoted"
    ROLLED_BACK = "rolled_back", "Rolled back"
    ABORTED = "aborted", "Aborted"  # by a person, or superseded by a newer revision
    # A canary service's change the two units cannot run side by side (a deployment-mode change): the new revision
    # replaced the stable one by rolling update, and the rollout says why.
    ROLLING_UPDATE = "rolling_update", "Rolling update"


ACTIVE_PHASES = (RolloutPhase.RUNNING, RolloutPhase.PAUSED)


class DecisionAction(models.TextChoices):
    """What a decision did: the analysis' actions (apps.rollouts.analysis.Action) and a person's or the system's."""

    START = "start", "Started"
    ADVANCE = "advance", "Advanced"
    EXTEND = "extend", "Extended the window"
    HOLD = "hold", "Held"
    PROMOTE = "promote", "Promoted"
    ROLL_BACK = "roll_back", "Rolled back"
    PAUSE = "pause", "Paused"
    RESUME = "resume", "Resumed"
    ABORT = "abort", "Aborted"
    ROLLING_UPDATE = "rolling_update", "Replaced by rolling update"


class Verdict(models.TextChoices):
    PASS = "pass", "Pass"
    FAIL = "fail", "Fail"
    INCONCLUSIVE = "inconclusive", "Inconclusive"
    NONE = "", "No analysis"
