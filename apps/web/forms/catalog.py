"""Forms of a tenant's private catalog. ModelForms: Django runs each model's `clean()` (the API's rules)
when the form validates, with the tenant set on the instance first."""

from __future__ import annotations

from django import forms

from apps.catalog.choices import DeploymentMode
from apps.catalog.hfconfig import ConfigError, model_facts
from apps.catalog.models import Adapter, Model, Runtime
from apps.web.forms import PlainLabels


class CatalogForm(PlainLabels, forms.ModelForm):
    """Private entries: the tenant is the page's, never chosen in the form."""

    def __init__(self, *args, tenant, **kwargs):
        super().__init__(*args, **kwargs)
        self.instance.tenant = tenant
        self.tenant = tenant


class ModelEntryForm(CatalogForm):
    hf_config = forms.CharField(
        label="Hugging Face config.json", required=False, widget=forms.Textarea(attrs={"rows": 4}),
        help_text="Paste a model's config.json and choose Fill from config to fill the architecture fields.")

    class Meta:
        model = Model
        fields = ["name", "display_name", "source_uri", "license", "parameters_billions",
                  "active_parameters_billions", "layers", "hidden_size", "attention_heads", "kv_heads", "head_dim",
                  "max_context", "dtype", "kv_layout"]

    def fill_from_config(self) -> dict | None:
        """Read the pasted config.json: the facts it gives, or None with errors on `hf_config`."""
        text = (self.data.get(self.add_prefix("hf_config")) or "").strip()
        if not text:
            self.add_error("hf_config", "Paste the contents of a config.json first.")
            return None
        try:
            return model_facts(text)
        except ConfigError as exc:
            for key, reason in exc.errors.items():
                self.add_error("hf_config", f"{key}: {reason}" if key != "json" else f"Not a config.json: {reason}")
            return None


class AdapterEntryForm(CatalogForm):
    class Meta:
        model = Adapter
        fields = ["name", "base_model", "source_uri", "rank"]

    def __init__(self, *args, tenant, **kwargs):
        super().__init__(*args, tenant=tenant, **kwargs)
        self.fields["base_model"].queryset = Model.objects.usable_by_tenant(tenant.pk)


class RuntimeEntryForm(CatalogForm):
    default_args = forms.CharField(label="Default args", required=False, widget=forms.Textarea(attrs={"rows": 2}),
                                   help_text="One argument per line.")
    supported_modes = forms.MultipleChoiceField(choices=DeploymentMode.choices, widget=forms.CheckboxSelectMultiple,
                                                initial=[DeploymentMode.STANDARD])

    class Meta:
        model = Runtime
        fields = ["name", "engine", "image", "tag", "default_args", "supported_modes"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not self.is_bound and self.instance.pk:
            self.initial["default_args"] = "\n".join(self.instance.default_args or [])

    def clean_default_args(self):
        return [line.strip() for line in (self.cleaned_data.get("default_args") or "").splitlines() if line.strip()]


KINDS = {"models": ModelEntryForm, "adapters": AdapterEntryForm, "runtimes": RuntimeEntryForm}
