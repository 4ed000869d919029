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

    def clean(self):
        data = super().clean()
        if data.get("expires_days"):
            # Set before the model's clean() runs (ModelForm's _post_clean), which checks the cap.
            self.instance.issued_at = timezone.now()
            self.instance.expires_at = self.instance.issued_at + timedelta(days=data["expires_days"])
        return data
