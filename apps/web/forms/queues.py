"""The form of a tenant queue in the portal (staff only): per GPU type its nominal GPUs, borrowing and lending
limits, and the queue's cohort and weight. It only collects: `TenantQueue.clean()` judges, as for the API and the
admin, and `attach_errors` puts its messages ("l4-24gb: …") beside the input of that GPU type."""

from __future__ import annotations

import re

from django import forms

from apps.tenancy.choices import ANY_GPU_TYPE
from apps.tenancy.models import TenantQueue
from apps.web.forms import PlainLabels
from capacity.gpus import choices as gpu_choices

# (key in the queue's maps, its name in field names, its words in labels); "*" first: the migrated hard quota.
ENTRIES = ((ANY_GPU_TYPE, "any", "any GPU type"),
           *((key, key.replace("-", "_"), label) for key, label in gpu_choices()))
MAPS = (("nominal", "nominal", "Nominal GPUs"), ("borrowing_limit", "borrowing", "Borrowing limit"),
        ("lending_limit", "lending", "Lending limit"))
WHOLE = re.compile(r"-?[0-9]+")


def _value(text: str):
    """A typed number as an integer; anything else as typed, for the model's rules to refuse in their words."""
    text = text.strip()
    return int(text) if WHOLE.fullmatch(text) else text


class QueueForm(PlainLabels, forms.Form):
    cohort = forms.CharField(required=False, max_length=63,
                             help_text="Queues of one cohort lend each other unused quota; empty: the cluster's.")
    weight = forms.DecimalField(required=False, max_digits=6, decimal_places=2,
                                help_text="Fair sharing: borrowers share the spare GPUs by weight.")

    def __init__(self, *args, queue: TenantQueue, **kwargs):
        super().__init__(*args, **kwargs)
        self.queue = queue
        self.prefix = f"q{queue.pk}"
        for key, slug, words in ENTRIES:
            for attr, field, label in MAPS:
                self.fields[f"{field}_{slug}"] = forms.CharField(
                    required=False, label=f"{label}, {words}", widget=forms.TextInput(attrs={"inputmode": "numeric"}),
                    initial="" if getattr(queue, attr).get(key) is None else getattr(queue, attr)[key])
        if not self.is_bound:
            self.initial.update(cohort=queue.cohort, weight=queue.weight)

    def rows(self) -> list[tuple[str, list]]:
        """One row per GPU type: its words and its three inputs (the template draws a table)."""
        return [(words, [self[f"{field}_{slug}"] for _attr, field, _label in MAPS]) for _key, slug, words in ENTRIES]

    def set_rows(self) -> list[tuple[str, list]]:
        """The rows with something set, as read-only text (the page of members who are not staff)."""
        return [(words, [field.value() if field.value() not in (None, "") else "none" for field in inputs])
                for words, inputs in self.rows() if any(field.value() not in (None, "") for field in inputs)]

    def apply(self) -> TenantQueue:
        """The queue as it would be saved (unsaved): empty inputs are left out of the maps."""
        queue, data = self.queue, self.cleaned_data
        for attr, field, _label in MAPS:
            setattr(queue, attr, {key: _value(data[f"{field}_{slug}"]) for key, slug, _words in ENTRIES
                                  if data.get(f"{field}_{slug}", "").strip()})
        queue.cohort = data.get("cohort") or ""
        queue.weight = data["weight"] if data.get("weight") is not None else 1
        return queue

    def attach_errors(self, errors: dict[str, list[str]]) -> None:
        """Put `TenantQueue.clean()`'s messages beside the inputs they are about."""
        fields = {attr: field for attr, field, _label in MAPS}
        slugs = {key: slug for key, slug, _words in ENTRIES}
        for name, messages in errors.items():
            for message in messages:
                key, sep, _rest = message.partition(": ")
                target = f"{fields.get(name)}_{slugs[key]}" if name in fields and sep and key in slugs else name
                self.add_error(target if target in self.fields else None, message)
