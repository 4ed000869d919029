"""The what-if lab's forms: the load (recorded or an uploaded trace), a trace upload, and one row per alternative.

Nothing here decides what is valid: the rows become the API's alternatives and `apps.whatif.runs.start_run`
judges them with the service's own `clean()`; `attach_problems` puts each problem ("alternatives[1].pools: …")
beside its row, and upload problems ("line 3, column TIMESTAMP: …") beside the file input.
"""

from __future__ import annotations

import re

from django import forms

from apps.catalog import kvoffload
from apps.serving.choices import GpuType, RoutingPolicy
from apps.web.forms import PlainLabels
from apps.whatif.fleet import BUILTIN_TARGETS
from apps.whatif.models import FORMAT_CHOICES, Trace
from apps.whatif.scenarios import MAX_ALTERNATIVES

ROWS = 4  # alternative rows on a fresh page (up to MAX_ALTERNATIVES when prefilled)
UNCHANGED = [("", "Unchanged")]
KV_DTYPES = [*UNCHANGED, ("auto", "auto (the model's dtype)"), ("fp8", "fp8")]
ON_OFF = [*UNCHANGED, ("true", "On"), ("false", "Off")]
AUTOSCALERS = [*UNCHANGED, ("none", "None (fixed replicas)"), ("builtin", "Built-in")]
POOL_INTS = ("gpus_per_replica", "replicas", "min_replicas", "max_replicas")
ENGINE_INTS = ("tensor_parallel_size", "max_num_seqs", "max_num_batched_tokens", "num_speculative_tokens")
SPECULATIVE_SETTINGS = ("speculative_method", "speculative_model", "num_speculative_tokens")
SPECULATIVE = [*UNCHANGED, ("ngram", "n-gram (vLLM)"), ("off", "Off")]
KV_TIERS = [*UNCHANGED, *((b, b) for bs in kvoffload.BACKENDS.values() for b in bs)]


class LoadForm(PlainLabels, forms.Form):
    trace = forms.ModelChoiceField(Trace.objects.none(), required=False, label="Load",
                                   empty_label="Recorded load (the last hour)",
                                   help_text="The service's own traffic, or a trace uploaded for this tenant.")

    def __init__(self, *args, tenant, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["trace"].queryset = Trace.objects.filter(tenant=tenant).defer("data")
        self.fields["trace"].label_from_instance = lambda t: (f"Trace {t.name}: {t.requests} requests over "
                                                              f"{t.duration_s:.0f} s")


class TraceUploadForm(PlainLabels, forms.Form):
    name = forms.CharField(max_length=120, label="Trace name")
    format = forms.ChoiceField(choices=FORMAT_CHOICES, label="Format")
    file = forms.FileField(label="Trace file", help_text="Bad rows are named by line and column; nothing is stored "
                                                         "until every row reads.")


class AlternativeForm(PlainLabels, forms.Form):
    """One alternative: a name and the changes to the current configuration (empty fields change nothing)."""

    name = forms.CharField(max_length=60, required=False, label="Name")
    gpu_type = forms.ChoiceField(choices=[*UNCHANGED, *GpuType.choices], required=False, label="GPU type")
    gpus_per_replica = forms.IntegerField(required=False, min_value=1, label="GPUs per replica")
    tensor_parallel_size = forms.IntegerField(required=False, min_value=1, label="Tensor parallel size")
    replicas = forms.IntegerField(required=False, min_value=0, label="Replicas")
    min_replicas = forms.IntegerField(required=False, min_value=0, label="Min replicas")
    max_replicas = forms.IntegerField(required=False, min_value=0, label="Max replicas")
    max_num_seqs = forms.IntegerField(required=False, min_value=1, label="Max concurrent sequences")
    max_num_batched_tokens = forms.IntegerField(required=False, min_value=1, label="Max batched tokens per step")
    speculative = forms.ChoiceField(choices=SPECULATIVE, required=False, label="Speculative decoding")
    num_speculative_tokens = forms.IntegerField(required=False, min_value=1, label="Speculative tokens")
    kv_offload_backend = forms.ChoiceField(choices=KV_TIERS, required=False, label="KV-cache CPU tier")
    kv_offload_size_gib = forms.FloatField(required=False, label="CPU tier size (GiB per GPU)")
    kv_cache_dtype = forms.ChoiceField(choices=KV_DTYPES, required=False, label="KV-cache dtype")
    enable_prefix_caching = forms.ChoiceField(choices=ON_OFF, required=False, label="Prefix caching")
    routing_policy = forms.ChoiceField(choices=[*UNCHANGED, *RoutingPolicy.choices], required=False,
                                       label="Routing policy")
    autoscaler = forms.ChoiceField(choices=AUTOSCALERS, required=False, label="Autoscaler")
    scale_to_zero_after_seconds = forms.IntegerField(required=False, min_value=1, label="Scale to zero after idle (s)")

    def filled(self) -> bool:
        return any(v not in (None, "") for v in self.cleaned_data.values())

    def clean(self):
        data = super().clean()
        if any(v not in (None, "") for k, v in data.items() if k != "name") and not data.get("name"):
            self.add_error("name", "Name this alternative.")
        return data

    def alternative(self) -> dict:
        """The API's form of this row (only what it changes)."""
        d = self.cleaned_data
        out: dict = {"name": d["name"]}
        out |= {k: d[k] for k in POOL_INTS if d.get(k) is not None}
        if d.get("gpu_type"):
            out["gpu_type"] = d["gpu_type"]
        if d.get("routing_policy"):
            out["routing_policy"] = d["routing_policy"]
        engine = {k: d[k] for k in ENGINE_INTS if d.get(k) is not None}
        if d.get("kv_cache_dtype"):
            engine["kv_cache_dtype"] = d["kv_cache_dtype"]
        if d.get("enable_prefix_caching"):
            engine["enable_prefix_caching"] = d["enable_prefix_caching"] == "true"
        if d.get("speculative") == "ngram":
            engine["speculative_method"] = "ngram"
        elif d.get("speculative") == "off":  # nulls: back to the engine's default, no speculative decoding
            engine |= dict.fromkeys(SPECULATIVE_SETTINGS)
        if d.get("kv_offload_backend"):  # a size left empty is the service's validation's to name
            engine["kv_offload"] = {"backend": d["kv_offload_backend"], "size_gib": d.get("kv_offload_size_gib")}
        if engine:
            out["engine_settings"] = engine
        if d.get("autoscaler") == "none":
            out["autoscaling"] = {"autoscaler": "none"}
        elif d.get("autoscaler") == "builtin" or d.get("scale_to_zero_after_seconds"):
            out["autoscaling"] = {"autoscaler": "builtin", "targets": dict(BUILTIN_TARGETS)}
            if d.get("scale_to_zero_after_seconds"):
                out["autoscaling"]["scale_to_zero_after_seconds"] = d["scale_to_zero_after_seconds"]
        return out


def initial_of(alternative: dict) -> dict:
    """A row's initial values from an alternative (a link from an advice card, or the lab's defaults)."""
    engine = alternative.get("engine_settings") or {}
    autoscaling = alternative.get("autoscaling") or {}
    row = {"name": alternative.get("name", "")}
    row |= {k: alternative[k] for k in (*POOL_INTS, "gpu_type", "routing_policy") if k in alternative}
    row |= {k: engine[k] for k in (*ENGINE_INTS, "kv_cache_dtype") if k in engine}
    if "enable_prefix_caching" in engine:
        row["enable_prefix_caching"] = "true" if engine["enable_prefix_caching"] else "false"
    if engine.get("speculative_method") == "ngram":
        row["speculative"] = "ngram"
    elif any(k in engine and engine[k] is None for k in SPECULATIVE_SETTINGS):
        row["speculative"] = "off"
        row.pop("num_speculative_tokens", None)
    if isinstance(engine.get("kv_offload"), dict):
        row["kv_offload_backend"] = engine["kv_offload"].get("backend")
        row["kv_offload_size_gib"] = engine["kv_offload"].get("size_gib")
    if autoscaling.get("autoscaler") in ("none", "builtin"):
        row["autoscaler"] = autoscaling["autoscaler"]
    if autoscaling.get("scale_to_zero_after_seconds"):
        row["scale_to_zero_after_seconds"] = autoscaling["scale_to_zero_after_seconds"]
    return row


def alternative_forms(data=None, initial: list[dict] | None = None) -> list[AlternativeForm]:
    rows = max(ROWS, len(initial or []))
    if data is not None:
        rows = min(MAX_ALTERNATIVES, max(ROWS, sum(1 for k in data if k.endswith("-name") and k.startswith("alt"))))
    initial = initial or []
    return [AlternativeForm(data, prefix=f"alt{i}", initial=initial_of(initial[i]) if i < len(initial) else None)
            for i in range(rows)]


PROBLEM = re.compile(r"^alternatives\[(\d+)\]\.?(\S*?):? (.*)$")


def attach_problems(problems: list[str], rows: list[tuple[int, AlternativeForm]]) -> list[str]:
    """Put each of the lab's problems on its row (`rows` pairs an alternative's index with its form); returns
    the problems that name no row (shown above the form)."""
    by_index = dict(rows)
    left = []
    for problem in problems:
        match = PROBLEM.match(problem)
        form = by_index.get(int(match.group(1))) if match else None
        if form is None:
            left.append(problem)
        else:
            form.add_error(None, f"{match.group(2) or 'this alternative'}: {match.group(3)}" if match.group(2)
                           else match.group(3))
    return left
