"""The service form of the portal: spec fields, engine settings, autoscaling and one pool form per role.

Nothing here decides what is valid: `to_service()` builds the spec and `apps.serving.actions.save_service`
runs `InferenceService.clean()` (the API's validation); `attach_errors` maps its field errors back onto
the inputs (`engine_settings` "max_model_len: …" onto the max model length box, `pools` "decode.replicas:
…" onto that pool's replicas box).
"""

from __future__ import annotations

from django import forms
from django.core import signing
from django.db.models import Q

from apps.catalog.choices import DeploymentMode
from apps.catalog.models import Adapter, Model, Runtime
from apps.clusters.models import Cluster
from apps.serving.autoscaling_spec import TARGETS, WINDOWS, merged_policy
from apps.serving.choices import MODE_POOL_ROLES, Autoscaler, GpuType, PoolRole, RoutingPolicy
from apps.serving.idle_spec import IDLE_KEYS, WhenIdle
from apps.serving.models import POOL_SPEC_FIELDS, InferenceService
from apps.serving.rendering.spec import PoolSpec
from apps.tenancy.models import PriorityClass
from apps.web.forms import PlainLabels
from apps.web.forms.rollout import RolloutFields, rollout_initial, rollout_input

TRISTATE = [("", "Engine default"), ("true", "On"), ("false", "Off")]
KV_OFFLOAD_BACKENDS = [("", "Off"), ("native", "vLLM native"), ("lmcache", "vLLM LMCache"),
                       ("hicache", "SGLang HiCache")]
ENGINE_FIELDS = ("max_model_len", "kv_cache_dtype", "enable_prefix_caching", "enable_chunked_prefill",
                 "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens", "tensor_parallel_size",
                 "pipeline_parallel_size", "quantization", "speculative_method", "speculative_model",
                 "num_speculative_tokens", "extra_args")
TARGET_LABELS = {
    "waiting_requests_per_replica": "Target waiting requests per replica",
    "running_requests_per_replica": "Target running requests per replica",
    "kv_cache_usage": "Target KV-cache usage (0–1)",
    "prompt_tokens_per_s_per_replica": "Target prompt tokens/s per replica",
    "generation_tokens_per_s_per_replica": "Target generated tokens/s per replica",
    "ttft_p95_seconds": "Target TTFT p95 (seconds)",
    "itl_p95_seconds": "Target inter-token latency p95 (seconds)",
}
WINDOW_LABELS = {
    "scale_up_stabilization_seconds": ("Scale-up stabilization window (seconds)",
                                       "0 reacts at once (Kubernetes' default)."),
    "scale_down_stabilization_seconds": ("Scale-down stabilization window (seconds)",
                                         "The highest recommendation within it holds; Kubernetes' default is 300."),
    "scale_to_zero_after_seconds": ("Scale to zero after idle (seconds)",
                                    "Serverless mode only: the pool goes to 0 after this long without requests."),
}
SIGNER_SALT = "portal.service-form.base"


def _tristate(value: str):
    return {"true": True, "false": False}.get(value)


class ServiceForm(RolloutFields, PlainLabels, forms.Form):
    """Everything a service's spec holds except its pools (see `PoolForm`)."""

    name = forms.CharField(max_length=40, help_text="Lower case letters, digits and dashes; unique in the tenant.")
    cluster = forms.ModelChoiceField(Cluster.objects.all(), to_field_name="name", empty_label=None)
    priority_class = forms.ModelChoiceField(
        PriorityClass.objects.all(), to_field_name="name", required=False, label="Priority class",
        help_text="Higher classes are admitted first and may preempt lower ones to take back their quota.")
    model = forms.ModelChoiceField(Model.objects.none(), help_text="Platform-wide or your tenant's own models.")
    runtime = forms.ModelChoiceField(Runtime.objects.none())
    adapters = forms.ModelMultipleChoiceField(Adapter.objects.none(), required=False,
                                              help_text="LoRA adapters of the chosen model.")
    deployment_mode = forms.ChoiceField(label="Mode", choices=DeploymentMode.choices)
    routing_policy = forms.ChoiceField(label="Routing", choices=RoutingPolicy.choices)
    # Engine settings (apps.catalog.engines.EngineSettings); empty means the engine's default.
    max_model_len = forms.IntegerField(label="Max model length (tokens)", required=False, min_value=1)
    kv_cache_dtype = forms.CharField(label="KV-cache dtype", required=False, help_text="e.g. auto, fp8_e4m3")
    enable_prefix_caching = forms.ChoiceField(label="Prefix caching", choices=TRISTATE, required=False)
    enable_chunked_prefill = forms.ChoiceField(label="Chunked prefill", choices=TRISTATE, required=False)
    gpu_memory_utilization = forms.FloatField(label="GPU memory utilisation (0–1)", required=False)
    max_num_seqs = forms.IntegerField(label="Max concurrent sequences", required=False)
    max_num_batched_tokens = forms.IntegerField(label="Max batched tokens per step", required=False,
                                                help_text="vLLM's step budget; SGLang's prefill chunk size")
    tensor_parallel_size = forms.IntegerField(label="Tensor parallel size", required=False,
                                              help_text="empty: the GPUs of a replica ÷ pipeline parallel size")
    pipeline_parallel_size = forms.IntegerField(label="Pipeline parallel size", initial=1)
    quantization = forms.CharField(label="Quantization", required=False, help_text="e.g. awq, gptq, fp8")
    speculative_method = forms.ChoiceField(label="Speculative decoding", required=False, choices=[
        ("", "Off, or a draft model"), ("ngram", "n-gram (drafts from the prompt; vLLM)"),
        ("draft_model", "Draft model")])
    speculative_model = forms.CharField(label="Speculative model", required=False)
    num_speculative_tokens = forms.IntegerField(label="Speculative tokens", required=False)
    extra_args = forms.CharField(label="Extra engine arguments", required=False,
                                 widget=forms.Textarea(attrs={"rows": 2}), help_text="One argument per line.")
    # engine_settings.kv_offload (apps/catalog/kvoffload.py): the KV cache's CPU tier.
    kv_offload_backend = forms.ChoiceField(label="KV-cache CPU tier", choices=KV_OFFLOAD_BACKENDS, required=False)
    kv_offload_size_gib = forms.FloatField(label="CPU tier size (GiB per GPU)", required=False,
                                           help_text="Host memory per GPU of a replica")
    # Autoscaling policy (apps.serving.autoscaling_spec).
    autoscaler = forms.ChoiceField(label="Autoscaler", choices=Autoscaler.choices, initial=Autoscaler.NONE)
    # What an idle serverless pool does (apps.serving.idle_spec); no bounds here: clean() says them.
    when_idle = forms.ChoiceField(label="When idle", choices=WhenIdle.choices, initial=WhenIdle.DELETE,
                                  required=False, help_text="Serverless only. Sleep keeps the GPUs and wakes in "
                                                            "seconds (vLLM's sleep mode).")
    sleep_level = forms.TypedChoiceField(label="Sleep level", coerce=int, required=False, empty_value=None,
                                         choices=[("", "Default (1)"), ("1", "1: weights kept in host memory"),
                                                  ("2", "2: weights discarded, reloaded on wake")])
    wake_objective_seconds = forms.FloatField(label="Wake objective (seconds)", required=False,
                                              help_text="The activation time the service accepts; "
                                                        "needed when idle is auto.")
    version = forms.IntegerField(widget=forms.HiddenInput, required=False)
    base = forms.CharField(widget=forms.HiddenInput, required=False)

    def __init__(self, *args, tenant, instance: InferenceService | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.tenant, self.instance = tenant, instance
        for name in TARGETS:
            self.fields[f"target_{name}"] = forms.FloatField(label=TARGET_LABELS[name], required=False)
        for name in WINDOWS:
            # No bounds here: clean() says what a window may be, with the same words as the API.
            label, help_text = WINDOW_LABELS[name]
            self.fields[name] = forms.IntegerField(label=label, help_text=help_text, required=False)
        # Only the clusters this tenant may use (and an edited service's own), so no other name is shown.
        clusters = Cluster.objects.usable_by_tenant(tenant.pk)
        if instance is not None and instance.cluster_id:
            clusters = Cluster.objects.filter(Q(pk__in=clusters.values("pk")) | Q(pk=instance.cluster_id))
        self.fields["cluster"].queryset = clusters.order_by("name")
        self.fields["model"].queryset = Model.objects.usable_by_tenant(tenant.pk)
        # The classes up to the tenant's highest (and an edited service's own); validation has the last word.
        classes = PriorityClass.objects.usable_by_tenant(tenant)
        if instance is not None and instance.priority_class_id:
            classes = PriorityClass.objects.filter(Q(pk__in=classes.values("pk")) | Q(pk=instance.priority_class_id))
        self.fields["priority_class"].queryset = classes
        default = tenant.priority_class_for(None)
        self.fields["priority_class"].empty_label = f"Tenant default ({default.name})" if default else "None"
        self.fields["runtime"].queryset = Runtime.objects.usable_by_tenant(tenant.pk)
        self.fields["adapters"].queryset = Adapter.objects.usable_by_tenant(tenant.pk).select_related("base_model")
        if instance is not None:
            self.fields["name"].disabled = True
            self.fields["name"].required = False
            if not self.is_bound:
                self.initial.update(initial_from(instance), base=sign_base(instance))

    def engine_settings(self) -> dict:
        """The engine settings dict as stored on the service (defaults omitted)."""
        data = self.cleaned_data
        values = {name: data.get(name) for name in ENGINE_FIELDS}
        for name in ("enable_prefix_caching", "enable_chunked_prefill"):
            values[name] = _tristate(values[name] or "")
        for name in ("kv_cache_dtype", "quantization", "speculative_method", "speculative_model"):
            values[name] = values[name] or None
        values["extra_args"] = [line.strip() for line in (data.get("extra_args") or "").splitlines() if line.strip()]
        values["pipeline_parallel_size"] = values["pipeline_parallel_size"] or 1
        if data.get("kv_offload_backend"):
            values["kv_offload"] = {"backend": data["kv_offload_backend"], "size_gib": data.get("kv_offload_size_gib")}
        return {k: v for k, v in values.items() if v is not None and v != []}

    def autoscaling(self, stored: dict | None = None) -> dict:
        """The form's autoscaling fields applied onto the stored policy: what the form does not show (tolerance,
        behavior rates, per-pool targets set through the API) survives the save."""
        data = self.cleaned_data
        shown = {"autoscaler": data.get("autoscaler") or Autoscaler.NONE,
                 "targets": {n: data.get(f"target_{n}") for n in TARGETS}, **{n: data.get(n) for n in WINDOWS}}
        policy = merged_policy(stored, shown)
        for key in IDLE_KEYS:
            value = data.get(key)
            if key == "when_idle" and value == WhenIdle.DELETE and not (stored or {}).get(key):
                value = None  # the default stays unwritten
            if value in (None, ""):
                policy.pop(key, None)
            else:
                policy[key] = value
        return policy

    def to_service(self) -> InferenceService:
        """The service as it would be saved (unsaved): the stored one with this form's values applied."""
        service = InferenceService.objects.get(pk=self.instance.pk) if self.instance else InferenceService(
            tenant=self.tenant, name=self.cleaned_data["name"])
        data = self.cleaned_data
        service.cluster, service.model, service.runtime = data["cluster"], data["model"], data["runtime"]
        service.priority_class = data.get("priority_class")
        service.deployment_mode, service.routing_policy = data["deployment_mode"], data["routing_policy"]
        service.engine_settings = self.engine_settings()
        service.autoscaling = self.autoscaling(service.autoscaling if self.instance else None)
        service.rollout = self.rollout(service.rollout if self.instance else None)
        return service

    def attach_errors(self, errors: dict[str, list[str]], pool_forms: list[PoolForm]) -> None:
        """Put `clean()`'s messages beside the inputs they are about."""
        by_role = {f.pool_role: f for f in pool_forms}
        for field, messages in errors.items():
            for message in messages:
                prefix, sep, rest = message.partition(": ")
                if field == "engine_settings" and prefix == "kv_offload":
                    self.add_error("kv_offload_size_gib" if "size_gib" in rest else "kv_offload_backend", rest)
                elif field == "engine_settings" and sep and prefix in self.fields:
                    self.add_error(prefix, rest)
                elif field == "pools" and sep and "." in prefix:
                    role, _, name = prefix.partition(".")
                    form = by_role.get(role)
                    if form is not None and name in form.fields:
                        form.add_error(name, rest)
                    else:
                        self.add_group_error("pools", message)
                elif field == "autoscaling" and _autoscaling_input(message) in self.fields:
                    self.add_error(_autoscaling_input(message), message)
                elif field == "rollout" and rollout_input(message)[0] in self.fields:
                    self.add_error(*rollout_input(message))
                elif field in self.fields:
                    self.add_error(field, message)
                else:
                    self.add_group_error(field, message)

    def add_group_error(self, group: str, message: str) -> None:
        """Errors about a whole group of inputs (pools, engine settings, autoscaling), shown above it."""
        self.group_errors = getattr(self, "group_errors", {})
        self.group_errors.setdefault(group, []).append(message)

    def engine_fields(self):
        return [self[name] for name in (*ENGINE_FIELDS, "kv_offload_backend", "kv_offload_size_gib")]

    def kept_autoscaling(self) -> list[str]:
        """The stored builtin settings this form has no input for, in words; saving the form keeps them."""
        policy = self.instance.autoscaling if self.instance is not None else None
        if not isinstance(policy, dict) or policy.get("autoscaler") != Autoscaler.BUILTIN:
            return []
        kept = [f"tolerance {policy['tolerance']}"] if "tolerance" in policy else []
        for direction, rules in (policy.get("behavior") or {}).items():
            rates = ", ".join(f"{p['type']} {p['value']} per {p['period_s']} s" for p in rules.get("policies", []))
            kept.append(f"{direction.replace('_', '-')}: {rules.get('select_policy')} of {rates or 'no policy'}")
        for role, entry in (policy.get("pools") or {}).items():
            targets = ", ".join(f"{TARGET_LABELS[k].removeprefix('Target ')} {v}"
                                for k, v in (entry.get("targets") or {}).items() if k in TARGET_LABELS)
            kept.append(f"{role} pool targets: {targets or 'none'}")
        return kept

    def autoscaling_fields(self):
        return [self["autoscaler"], *(self[f"target_{n}"] for n in TARGETS), *(self[n] for n in WINDOWS),
                *(self[n] for n in IDLE_KEYS)]


def _autoscaling_input(message: str) -> str:
    """The form input an `autoscaling_errors` message is about: "targets.kv_cache_usage must …" →
    target_kv_cache_usage, "scale_to_zero_after_seconds applies …" → that box, "autoscaler 'x' …" → autoscaler."""
    head = message.split(" ", 1)[0]
    return f"target_{head.removeprefix('targets.')}" if head.startswith("targets.") else head


def initial_from(service: InferenceService) -> dict:
    """Form values showing a stored service (the inverse of `to_service`)."""
    settings = dict(service.engine_settings or {})
    initial = {
        "name": service.name, "cluster": service.cluster, "model": service.model_id, "runtime": service.runtime_id,
        "adapters": list(service.adapters.values_list("pk", flat=True)), "deployment_mode": service.deployment_mode,
        "routing_policy": service.routing_policy, "version": service.version,
        "pipeline_parallel_size": 1, "priority_class": service.priority_class,
    }
    for name in ENGINE_FIELDS:
        if name in settings:
            value = settings[name]
            if isinstance(value, bool):
                value = "true" if value else "false"
            elif name == "extra_args":
                value = "\n".join(value)
            initial[name] = value
    if isinstance(settings.get("kv_offload"), dict):
        initial["kv_offload_backend"] = settings["kv_offload"].get("backend")
        initial["kv_offload_size_gib"] = settings["kv_offload"].get("size_gib")
    policy = service.autoscaling or {}
    initial["autoscaler"] = policy.get("autoscaler", Autoscaler.NONE)
    for name, value in (policy.get("targets") or {}).items():
        initial[f"target_{name}"] = value
    initial.update({name: policy[name] for name in (*WINDOWS, *IDLE_KEYS) if name in policy})
    initial.update(rollout_initial(service.rollout))
    return initial


def form_values(service: InferenceService) -> dict[str, str | list[str]]:
    """The service as the form posts it (strings; lists for multi-choice), pools included."""
    values: dict[str, str | list[str]] = {}
    for name, value in initial_from(service).items():
        if name in ("version", "base"):
            continue
        if name == "adapters":
            values[name] = [str(v) for v in value]
        else:
            values[name] = "" if value is None else str(getattr(value, "name", value))
    for pool in service.pools.all():
        values.update({f"pool-{pool.role}-{f}": str(getattr(pool, f)) for f in ("role", *POOL_SPEC_FIELDS)})
    return values


def sign_base(service: InferenceService) -> str:
    """The values the form was drawn from, signed, so a stale save can tell what changed meanwhile from
    what the user changed."""
    return signing.dumps(form_values(service), salt=SIGNER_SALT, compress=True)


def unsign_base(value: str) -> dict | None:
    try:
        return signing.loads(value, salt=SIGNER_SALT)
    except signing.BadSignature:
        return None


def _posted(data, name: str):
    return data.getlist(name) if name == "adapters" and hasattr(data, "getlist") else data.get(name, "")


def rebase(posted, base: dict, current: dict) -> tuple[dict, list[tuple[str, object, object]]]:
    """The user's edit moved onto the current version: values the user changed from `base` are kept,
    the others take the `current` value. Also returns what changed meanwhile (field, before, after)."""
    def value(values, name):  # a value the form leaves out is the empty one
        return values.get(name, [] if name == "adapters" else "")

    changed_meanwhile = [(k, value(base, k), value(current, k)) for k in sorted(set(base) | set(current))
                         if value(base, k) != value(current, k)]
    merged = {}
    for name in set(current) | set(base) | {k for k in posted if k != "csrfmiddlewaretoken"}:
        mine = _posted(posted, name)
        merged[name] = mine if mine != value(base, name) else value(current, name)
    return merged, changed_meanwhile


class PoolForm(PlainLabels, forms.Form):
    """One pool's size and hardware; the role is fixed by the deployment mode."""

    role = forms.ChoiceField(choices=PoolRole.choices, widget=forms.HiddenInput)
    replicas = forms.IntegerField(min_value=0, initial=1)
    min_replicas = forms.IntegerField(label="Min", min_value=0, initial=1)
    max_replicas = forms.IntegerField(label="Max", min_value=0, initial=1)
    gpu_type = forms.ChoiceField(label="GPU type", choices=GpuType.choices, initial=GpuType.H100_SXM_80GB)
    gpus_per_replica = forms.IntegerField(label="GPUs per replica", min_value=1, initial=1)
    nodes_per_replica = forms.IntegerField(label="Nodes per replica", min_value=1, initial=1)

    @property
    def pool_role(self) -> str:
        return self.initial.get("role") or self.data.get(self.add_prefix("role"), "")

    def spec(self) -> PoolSpec:
        return PoolSpec(**{f: self.cleaned_data[f] for f in ("role", *POOL_SPEC_FIELDS)})


def pool_forms(data, *, mode: str, service: InferenceService | None = None) -> list[PoolForm]:
    """One pool form per role the mode needs, filled from the stored pools or defaults."""
    stored = {p.role: p for p in service.pools.all()} if service is not None and service.pk else {}
    roles = sorted(MODE_POOL_ROLES.get(mode, {PoolRole.ENGINE}))
    forms_ = []
    for role in roles:
        pool = stored.get(role)
        initial = {"role": role, **({f: getattr(pool, f) for f in POOL_SPEC_FIELDS} if pool else {})}
        if mode == DeploymentMode.MULTI_NODE and not pool:
            initial["nodes_per_replica"] = 2
        prefix = f"pool-{role}"
        # A role the submitted form did not have yet (the mode just changed) starts from defaults.
        bound = data if data is not None and f"{prefix}-replicas" in data else None
        forms_.append(PoolForm(bound, prefix=prefix, initial=initial))
    return forms_


class ScaleForm(PlainLabels, forms.Form):
    """One pool's replicas and bounds (the Scale page)."""

    replicas = forms.IntegerField(min_value=0)
    min_replicas = forms.IntegerField(label="Min", min_value=0)
    max_replicas = forms.IntegerField(label="Max", min_value=0)
