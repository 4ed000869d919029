"""The rollout inputs of the service form: strategy, canary weights, step duration, tolerance.

They only collect: `InferenceService.clean()` (apps/serving/rollout_spec.py and the quota check) judges the
strategy they build, and `rollout_input` puts its messages beside the input they are about.
"""

from __future__ import annotations

import re

from django import forms

from apps.core.ids import ascii_int
from apps.serving.choices import RolloutStrategy
from apps.serving.rollout_spec import STEP_DEFAULTS, default_rollout, is_canary

ROLLOUT_FIELDS = ("rollout_strategy", "canary_weights", "canary_step_seconds", "canary_tolerance")
# The key a rollout message starts with → the input it is about.
_INPUTS = {"strategy": "rollout_strategy", "steps": "canary_weights", "min_duration_seconds": "canary_step_seconds",
           "tolerance": "canary_tolerance"}


class RolloutFields(forms.Form):
    # Not required: a post without it (an older page, a script) means the default, rolling.
    rollout_strategy = forms.ChoiceField(label="Rollout strategy", choices=RolloutStrategy.choices,
                                         initial=RolloutStrategy.ROLLING, required=False)
    canary_weights = forms.CharField(
        label="Canary steps (% of requests)", required=False,
        help_text="Rising percentages ending at 100 (the promotion), e.g. 5, 25, 50, 100.")
    canary_step_seconds = forms.IntegerField(
        label="Minimum step duration (seconds)", required=False,
        help_text="Each step's window before its analysis; empty keeps each step's own (300 by default).")
    canary_tolerance = forms.FloatField(
        label="Analysis tolerance (0–1)", required=False,
        help_text="How much worse than stable the canary may be: 0.2 allows TTFT, ITL and errors 20 % worse.")

    def clean_canary_weights(self) -> list[int] | None:
        text = (self.cleaned_data.get("canary_weights") or "").strip()
        if not text:
            return None
        parts = [p for p in re.split(r"[,\s]+", text) if p]
        weights = [ascii_int(p) for p in parts]
        if None in weights:
            raise forms.ValidationError("Write whole percentages separated by commas, e.g. 5, 25, 50, 100.")
        return weights

    def rollout(self, stored: dict | None = None) -> dict:
        """The strategy the form describes; what it has no input for (per-step analysis, min_requests, …)
        survives from the stored one."""
        data = self.cleaned_data
        if data.get("rollout_strategy") != RolloutStrategy.CANARY:
            return default_rollout()
        stored = stored if is_canary(stored) else {"strategy": RolloutStrategy.CANARY.value}
        old_steps = {s.get("weight"): s for s in stored.get("steps") or [] if isinstance(s, dict)}
        steps = []
        for weight in data.get("canary_weights") or []:
            step = {**old_steps.get(weight, {}), "weight": weight}
            if weight == 100:
                step = {"weight": 100}  # the promotion: no window of its own
            elif data.get("canary_step_seconds") is not None:
                step["min_duration_seconds"] = data["canary_step_seconds"]
            steps.append(step)
        spec = {**stored, "steps": steps}
        if data.get("canary_tolerance") is not None:
            spec["tolerance"] = data["canary_tolerance"]
        return spec

    def rollout_fields(self):
        return [self[name] for name in ROLLOUT_FIELDS]


def rollout_input(message: str) -> tuple[str, str]:
    """(the input a rollout message is about, the words to show there): "steps: weights must rise …" →
    (canary_weights, "weights must rise …")."""
    head = re.split(r"[: ']", message, maxsplit=1)[0]
    name = _INPUTS.get(head, "")
    shown = message.removeprefix(f"{head}: ") if message.startswith(f"{head}: ") else message
    return name, shown


def rollout_initial(spec: dict | None) -> dict:
    """The inputs showing a stored strategy."""
    if not is_canary(spec):
        return {"rollout_strategy": RolloutStrategy.ROLLING.value}
    steps = [s for s in spec.get("steps") or [] if isinstance(s, dict)]
    durations = {s.get("min_duration_seconds", STEP_DEFAULTS["min_duration_seconds"])
                 for s in steps if s.get("weight") != 100}
    return {"rollout_strategy": RolloutStrategy.CANARY.value,
            "canary_weights": ", ".join(str(s.get("weight")) for s in steps),
            "canary_step_seconds": durations.pop() if len(durations) == 1 else None,
            "canary_tolerance": spec.get("tolerance")}
