"""The inference-key form. Its rules are the model's (`InferenceKey.clean()` and the limit fields'
validators, the ones the API applies), reached through ModelForm's full_clean, so the portal and the
API refuse the same inputs with the same words."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.core.validators import MinValueValidator
from django.utils import timezone

from apps.gateway.models import InferenceKey
from apps.serving.models import InferenceService
from apps.web.forms import PlainLabels
from apps.web.forms.tenancy import EXPIRY_DAYS, max_token_days
from gateway.batch_lines import checked_file
from gateway.batch_vocab import MAX_FILE_BYTES, MAX_FILE_LINES
from gateway.validation import ENDPOINTS, Invalid


class InferenceKeyForm(PlainLabels, forms.ModelForm):
    expires_days = forms.TypedChoiceField(label="Expires in", coerce=int, initial=30)

    class Meta:
        model = InferenceKey
        fields = ["name", "services", "rpm", "tpm", "concurrency", "monthly_token_budget", "priority"]
        labels = {"priority": "Priority band",
                  "rpm": "Requests per minute", "tpm": "Tokens per minute", "concurrency": "Concurrent requests",
                  "monthly_token_budget": "Tokens per month"}
        help_texts = {"name": "What calls with it, e.g. support-bot.",
                      "services": "None ticked: every service of the tenant, now and later."}
        widgets = {"services": forms.CheckboxSelectMultiple}

    def __init__(self, *args, tenant, **kwargs):
        kwargs.setdefault("instance", InferenceKey(tenant=tenant))
        super().__init__(*args, **kwargs)
        days = [d for d in EXPIRY_DAYS if d <= max_token_days()] or [max_token_days()]
        self.fields["expires_days"].choices = [(d, f"{d} days") for d in days]
        self.fields["services"].queryset = InferenceService.objects.filter(tenant=tenant).order_by("name")
        for name in ("rpm", "tpm", "concurrency", "monthly_token_budget"):
            # The bound is the model field's (at least 1, checked by full_clean as for the API), not the
            # form field's own "at least 0", so both refuse with the same words.
            field = self.fields[name]
            field.validators = [v for v in field.validators if not isinstance(v, MinValueValidator)]
            field.widget.attrs.pop("min", None)
            field.widget.attrs.update({"inputmode": "numeric", "placeholder": "no limit"})
        # Left empty, a key keeps the band it has (a new one: the default); its bounds are the model's clean().
        self.fields["priority"].required = False

    def clean_priority(self):
        value = self.cleaned_data.get("priority")
        return self.instance.priority if value is None else value

    def clean(self):
        data = super().clean()
        if data.get("expires_days"):
            # Set before the model's clean() runs (ModelForm's _post_clean), which checks the cap.
            self.instance.issued_at = timezone.now()
            self.instance.expires_at = self.instance.issued_at + timedelta(days=data["expires_days"])
        return data


class BatchForm(PlainLabels, forms.Form):
    """A batch started from the portal: a JSONL file of requests run as one of the tenant's keys. The file's
    rules are the gateway's (gateway.batch_lines.checked_file), so both doors refuse the same files."""

    key = forms.ModelChoiceField(queryset=InferenceKey.objects.none(), label="Run as key", empty_label=None,
                                 help_text="Each line is metered to this key and bound by its limits.")
    endpoint = forms.ChoiceField(choices=[(e, e) for e in ENDPOINTS], initial="/v1/chat/completions")
    file = forms.FileField(label="Requests (JSONL)", help_text=(
        f"One request a line: custom_id, method POST, url (the endpoint) and body; at most "
        f"{MAX_FILE_LINES:,} lines and {MAX_FILE_BYTES // 2**20} MiB."))

    def __init__(self, *args, tenant, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["key"].queryset = InferenceKey.objects.filter(
            tenant=tenant, revoked_at__isnull=True, expires_at__gt=timezone.now()).order_by("name")
        self.fields["file"].widget.attrs["accept"] = ".jsonl,application/jsonl,application/x-ndjson"

    def clean_file(self):
        upload = self.cleaned_data["file"]
        if upload.size > MAX_FILE_BYTES:  # before reading it into memory
            raise forms.ValidationError(f"A file may hold at most {MAX_FILE_BYTES} bytes.", code="too_large")
        content = upload.read()
        try:
            self.lines = checked_file(content)
        except Invalid as exc:
            raise forms.ValidationError(exc.message, code="invalid") from exc
        self.content = content
        return upload
