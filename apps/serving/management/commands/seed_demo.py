"""`manage.py seed_demo`: an idempotent demo world (catalog, runtimes, tenants, users, the local
simulator cluster, and services covering every deployment mode on both engines).

Architecture facts come from capacity.known (reference/gpus-and-models.md). Running it twice changes nothing.
"""

from __future__ import annotations

import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from apps.catalog.choices import DeploymentMode, EngineKind
from apps.catalog.models import Adapter, Model, Runtime
from apps.clusters.models import Cluster
from apps.core.audit import record_change
from apps.core.choices import AuditAction, AuditVia, Role
from apps.serving.actions import save_service
from apps.serving.models import InferenceService
from apps.serving.rendering.spec import PoolSpec
from apps.serving.rollout_spec import default_rollout
from apps.tenancy.models import Membership, PriorityClass, Tenant
from apps.tenancy.queues import set_gpu_quota
from capacity.known import KNOWN_MODELS
from enginevocab import sglang, vllm

LABEL = "command:seed_demo"

# name, source, license; the architecture facts are the published configs of capacity.known.
MODELS = [
    ("llama-3-1-8b-instruct", "hf://meta-llama/Llama-3.1-8B-Instruct", "llama3.1"),
    ("llama-3-1-70b-instruct", "hf://meta-llama/Llama-3.1-70B-Instruct", "llama3.1"),
    ("qwen2-5-7b-instruct", "hf://Qwen/Qwen2.5-7B-Instruct", "apache-2.0"),
    ("qwen2-5-32b-instruct", "hf://Qwen/Qwen2.5-32B-Instruct", "apache-2.0"),
    ("qwen2-5-72b-instruct", "hf://Qwen/Qwen2.5-72B-Instruct", "qwen"),
    ("qwen3-8b", "hf://Qwen/Qwen3-8B", "apache-2.0"),
    ("mistral-7b-instruct-v0-3", "hf://mistralai/Mistral-7B-Instruct-v0.3", "apache-2.0"),
    ("mixtral-8x7b-instruct-v0-1", "hf://mistralai/Mixtral-8x7B-Instruct-v0.1", "apache-2.0"),
]

# The real-engine service's model and adapters (docs/real-engines.md): the tiny Llama `python -m kubesim tiny-model`
# writes by default (2 layers, hidden 128, 4 heads of 32, 2 KV heads, 4,096 tokens, 1.3 M float32 parameters) and two
# adapters `tiny-adapter --seed N` writes, in the models folder of the demo's cpu-real node (`make demo` writes them to
# .data/models, kubesim's --models-dir). A vLLM service of a local:// model runs on cpu-real nodes: the real vLLM.
TINY_MODEL = ("tiny-llama", "local://tiny", dict(
    display_name="Tiny Llama (generated here)", parameters_billions=0.0013, layers=2, hidden_size=128,
    attention_heads=4, kv_heads=2, head_dim=32, max_context=2048, dtype="float32", license="none"))
TINY_ADAPTERS = [("tiny-sql", "local://adapters/tiny-sql", 8), ("tiny-chat", "local://adapters/tiny-chat", 8)]

RUNTIMES = [
    ("vllm", EngineKind.VLLM, vllm.IMAGE, vllm.TAG),
    # A newer build to change a service to in the portal: acme/llama-8b-chat rolls it out as a canary.
    ("vllm-0-34", EngineKind.VLLM, vllm.IMAGE, "v0.34.0"),
    ("sglang", EngineKind.SGLANG, sglang.IMAGE, sglang.TAG),
]

TENANTS = [("acme", "Acme Research", 32), ("globex", "Globex Support", 32), ("initech", "Initech Batch", 32)]
# The L4s of the demo's cohort (the kubesim cluster's): acme's chat service runs in its own 6 (1-3 replicas, twice
# that during a canary), globex keeps its 1 for its serverless service, initech has none and runs its best-effort
# batch service's 5 replicas on the 5 acme does not use ("Admitted on borrowed quota (5 L4 from acme)"). On the chat
# load's first rise (Procfile `load`, minutes in) the autoscaler takes the chat to 2 replicas: acme reclaims a lent
# L4 by preempting one of initech's batch replicas, which waits until the chat scales back. Other GPU types: each
# tenant's former 32-GPU hard quota, as before.
L4 = "l4-24gb"
DEMO_QUEUES = {
    "acme": {"nominal": {L4: 6}, "lending_limit": {}, "borrowing_limit": {L4: 0}},
    "globex": {"nominal": {L4: 1}, "lending_limit": {L4: 0}, "borrowing_limit": {}},
    "initech": {"nominal": {L4: 0}, "lending_limit": {}, "borrowing_limit": {}},
}
# The highest class each tenant may use, and the class of services that name none.
DEMO_CLASSES = {"acme": ("production", "standard"), "globex": ("production", "standard"),
                "initech": ("best-effort", "best-effort")}
PRIORITY = {("acme", "llama-8b-chat"): "production"}

BUILTIN = {"autoscaler": "builtin", "targets": {"waiting_requests_per_replica": 4, "kv_cache_usage": 0.8}}
# The serverless service sleeps instead of going to zero when only that meets its wake objective (docs/sleep-mode.md):
# the Procfile's `wake` load comes every five minutes and a cold start takes longer than 10 s, so the rule sleeps it.
SERVERLESS_IDLE = {"scale_to_zero_after_seconds": 120, "when_idle": "auto", "wake_objective_seconds": 10}
# The chat service the demo's load drives (Procfile `load`): on its rise the prefill load and the load forecast
# scale it up (the forecast a cold start ahead), its long prompts' TTFT is held by the floor rule, and it comes
# back down a minute after the rise (a short scale-down window, so a newcomer sees it all in a few minutes). No
# running target: on an L4 a running target would scale on decode occupancy before the prompt load shows.
DEMO_AUTOSCALED = {"autoscaler": "builtin",
                   "targets": {"waiting_requests_per_replica": 4, "ttft_p95_seconds": 2.0},
                   "behavior": {"scale_down": {"stabilization_window_s": 60}}}

# The chat service's rollout strategy: a new revision runs beside the stable one at 10 % of the requests, then 50 %,
# each step two minutes at least and judged (at least 30 requests a side; the demo's quiet minutes extend a window,
# up to four times, until a burst brings them), then promoted. docs/rollouts.md walks through it.
DEMO_CANARY = {"strategy": "canary", "min_requests": 30, "max_extensions": 4,
               "steps": [{"weight": 10, "min_duration_seconds": 120}, {"weight": 50, "min_duration_seconds": 120},
                         {"weight": 100}]}
ROLLOUTS = {("acme", "llama-8b-chat"): DEMO_CANARY}

# tenant, name, model, runtime, mode, engine settings, routing, autoscaling, pools
SERVICES = [
    (
        "acme",
        "llama-8b-chat",
        "llama-3-1-8b-instruct",
        "vllm",
        DeploymentMode.STANDARD,
        {"max_model_len": 16384, "enable_prefix_caching": True},
        "prefix_aware",
        DEMO_AUTOSCALED,
        [PoolSpec("engine", replicas=1, min_replicas=1, max_replicas=3, gpus_per_replica=1, gpu_type="l4-24gb")],
    ),
    (
        # A KV-cache CPU tier (engine_settings.kv_offload): a quarter of the H100 leaves the GPU about 29,000
        # tokens of KV cache, fewer than the 16 sessions' 2,700-token prefixes of the demo's `rag` load (Procfile),
        # so prefixes the GPU evicts come back from the 16 GiB tier (131,000 tokens): its KV cache panel shows
        # both tiers. It serves the same model as llama-8b-chat: a request naming the model is balanced between the
        # two (gateway/names.py) and says so in x-gateway-model-rule; the demo's loads name each service.
        "acme",
        "llama-8b-rag",
        "llama-3-1-8b-instruct",
        "vllm",
        DeploymentMode.STANDARD,
        {"max_model_len": 8192, "enable_prefix_caching": True, "gpu_memory_utilization": 0.25,
         "kv_offload": {"backend": "native", "size_gib": 16}},
        "round_robin",
        {"autoscaler": "none"},
        [PoolSpec("engine", replicas=1, min_replicas=1, max_replicas=1, gpus_per_replica=1, gpu_type="h100-sxm-80gb")],
    ),
    (
        "acme",
        "qwen-7b-pd",
        "qwen2-5-7b-instruct",
        "vllm",
        DeploymentMode.PD_DISAGGREGATED,
        {"max_model_len": 32768, "kv_cache_dtype": "fp8"},
        "kv_aware",
        {"autoscaler": "none"},
        [
            PoolSpec("prefill", replicas=1, min_replicas=1, max_replicas=2, gpus_per_replica=1),
            PoolSpec("decode", replicas=1, min_replicas=1, max_replicas=2, gpus_per_replica=1),
        ],
    ),
    (
        "globex",
        "llama-70b-multinode",
        "llama-3-1-70b-instruct",
        "sglang",
        DeploymentMode.MULTI_NODE,
        {"tensor_parallel_size": 2, "pipeline_parallel_size": 2, "max_model_len": 32768},
        "cache_aware",
        {"autoscaler": "none"},
        [PoolSpec("leader", replicas=1, min_replicas=1, max_replicas=1, gpus_per_replica=2, nodes_per_replica=2)],
    ),
    (
        "globex",
        "mistral-7b-serverless",
        "mistral-7b-instruct-v0-3",
        "vllm",
        DeploymentMode.SERVERLESS,
        {"max_model_len": 8192},
        "round_robin",
        {**BUILTIN, **SERVERLESS_IDLE},
        [PoolSpec("engine", replicas=1, min_replicas=0, max_replicas=2, gpus_per_replica=1, gpu_type="l4-24gb")],
    ),
    (
        # Best-effort (initech's default class) on borrowed L4: a replica preempted when acme needs its own back.
        "initech",
        "batch-summaries",
        "qwen3-8b",
        "vllm",
        DeploymentMode.STANDARD,
        {"max_model_len": 8192},
        "round_robin",
        {"autoscaler": "none"},
        [PoolSpec("engine", replicas=5, min_replicas=5, max_replicas=5, gpus_per_replica=1, gpu_type="l4-24gb")],
    ),
    (
        # The real vLLM (CPU build) on kubesim's cpu-real node, with both adapters loaded at run time; the Procfile's
        # `tiny` load calls the two adapters and the base model through the gateway. Its pool counts one GPU of the
        # tenant's quota though the pod asks none (docs/real-engines.md, "The demo's real engine"). Four sequences at
        # once make the gateway's bound 4, so the `tiny` load's bursts wait at the door: its queue card moves.
        "acme",
        "tiny-real",
        "tiny-llama",
        "vllm",
        DeploymentMode.STANDARD,
        {"max_model_len": 1024, "max_num_seqs": 4},
        "round_robin",
        {"autoscaler": "none"},
        [PoolSpec("engine", replicas=1, min_replicas=1, max_replicas=1, gpus_per_replica=1, gpu_type="h100-sxm-80gb")],
    ),
]
SERVICE_ADAPTERS = {("acme", "tiny-real"): [name for name, _, _ in TINY_ADAPTERS]}


class Command(BaseCommand):
    help = "Create (or leave as is) a demo catalog, tenants, users, the simulator cluster and services."

    def add_arguments(self, parser):
        parser.add_argument(
            "--password",
            help="Password for the demo users this run creates (env DEMO_PASSWORD; generated when neither is "
            "given). Users that already exist keep theirs.",
        )

    def created(self, obj, was_created: bool) -> None:
        if was_created:
            record_change(actor=None, actor_label=LABEL, obj=obj, action=AuditAction.CREATE, via=AuditVia.COMMAND)
            self.count += 1

    def user(self, username: str, password: str, **defaults):
        """The demo user, created with `password` when missing; an existing user's password is never touched."""
        user, made = get_user_model().objects.get_or_create(username=username, defaults=defaults)
        if made:
            user.set_password(password)
            user.save(update_fields=["password"])
            self.users_created.append(username)
        self.created(user, made)
        return user

    @transaction.atomic
    def share_gpus(self, tenant, quota: int) -> None:
        """The tenant's queue on every cluster (its L4s in the demo's cohort, other types a hard quota) and classes."""
        queue = set_gpu_quota(tenant, quota)
        shape = DEMO_QUEUES[tenant.slug]
        for field, per_type in shape.items():
            setattr(queue, field, {**getattr(queue, field), **per_type})
        queue.save()
        highest, default = DEMO_CLASSES[tenant.slug]
        tenant.max_priority_class = PriorityClass.objects.filter(name=highest).first()
        tenant.default_priority_class = PriorityClass.objects.filter(name=default).first()
        tenant.save(update_fields=["max_priority_class", "default_priority_class"])

    def handle(self, *args, password, **options):
        self.count = 0
        self.users_created: list[str] = []
        password = password or os.environ.get("DEMO_PASSWORD") or secrets.token_urlsafe(16)
        self.user("admin", password, is_staff=True, is_superuser=True)
        models = self.seed_models()
        runtimes = self.seed_runtimes()
        cluster = self.seed_cluster()
        tenants = self.seed_tenants(password)
        self.seed_services(tenants, cluster, models, runtimes)
        self.report(password)

    def seed_models(self) -> dict[str, Model]:
        """The shared catalog's models, their architecture read from capacity.known."""
        models = {}
        for name, uri, license_ in MODELS:
            arch = KNOWN_MODELS[uri.removeprefix("hf://")]
            models[name], made = Model.objects.get_or_create(
                tenant=None,
                name=name,
                defaults=dict(
                    display_name=arch.name,
                    source_uri=uri,
                    parameters_billions=arch.params_b,
                    active_parameters_billions=arch.active_params_b,
                    layers=arch.layers,
                    hidden_size=arch.hidden,
                    attention_heads=arch.heads,
                    kv_heads=arch.kv_heads,
                    head_dim=arch.head_dim,
                    max_context=arch.max_context,
                    license=license_,
                ),
            )
            self.created(models[name], made)
        name, uri, facts = TINY_MODEL
        models[name], made = Model.objects.get_or_create(tenant=None, name=name, defaults=dict(source_uri=uri, **facts))
        self.created(models[name], made)
        for adapter, uri, rank in TINY_ADAPTERS:
            self.created(*Adapter.objects.get_or_create(tenant=None, name=adapter, defaults=dict(
                base_model=models[name], source_uri=uri, rank=rank)))
        return models

    def seed_runtimes(self) -> dict[str, Runtime]:
        """The shared catalog's runtimes, each supporting every deployment mode."""
        runtimes = {}
        for name, engine, image, tag in RUNTIMES:
            runtimes[name], made = Runtime.objects.get_or_create(
                tenant=None,
                name=name,
                defaults=dict(engine=engine, image=image, tag=tag, supported_modes=list(DeploymentMode.values)),
            )
            self.created(runtimes[name], made)
        return runtimes

    def seed_cluster(self) -> Cluster:
        """The local simulator cluster (KUBESIM_URL), open to every tenant."""
        cluster, made = Cluster.objects.get_or_create(
            name="kubesim",
            defaults=dict(
                api_url=os.environ.get("KUBESIM_URL", "http://127.0.0.1:6443"),
                insecure_simulator=True,
                open_to_all_tenants=True,
                node_model_volume="csi",  # kubesim mounts any volume; its model agent copies to the nodes
                description="The embedded simulated GPU cluster.",
            ),
        )
        self.created(cluster, made)
        return cluster

    def seed_tenants(self, password: str) -> dict[str, Tenant]:
        """The tenants, their GPU queues when new, and one user per role in each."""
        tenants = {}
        for slug, name, quota in TENANTS:
            tenants[slug], made = Tenant.objects.get_or_create(slug=slug, defaults={"name": name})
            self.created(tenants[slug], made)
            if made:
                self.share_gpus(tenants[slug], quota)
            for role in Role:
                user = self.user(f"{slug}-{role.value}", password)
                membership, made = Membership.objects.get_or_create(
                    user=user, tenant=tenants[slug], defaults={"role": role}
                )
                self.created(membership, made)
        return tenants

    def seed_services(self, tenants, cluster, models, runtimes) -> None:
        """The demo services missing so far, saved as the portal saves them (audit, revision, pools)."""
        for slug, name, model, runtime, mode, engine, routing, autoscaling, pools in SERVICES:
            if InferenceService.objects.filter(tenant=tenants[slug], name=name).exists():
                continue
            service = InferenceService(
                tenant=tenants[slug],
                name=name,
                cluster=cluster,
                model=models[model],
                runtime=runtimes[runtime],
                deployment_mode=mode,
                engine_settings=engine,
                routing_policy=routing,
                autoscaling=autoscaling,
                rollout=ROLLOUTS.get((slug, name)) or default_rollout(),
                priority_class=PriorityClass.objects.filter(name=PRIORITY.get((slug, name), "")).first(),
            )
            adapters = list(Adapter.objects.filter(tenant=None, name__in=SERVICE_ADAPTERS.get((slug, name), ())))
            save_service(service, pools=pools, adapters=adapters, actor=None, via=AuditVia.COMMAND, actor_label=LABEL)
            self.count += 1

    def report(self, password: str) -> None:
        """What this run created; the password only when this run created the users."""
        self.stdout.write(f"Demo data ready ({self.count} objects created).")
        if self.users_created:
            # The only time this password is shown when it was generated.
            self.stdout.write(f"Created users {', '.join(self.users_created)} with password:")
            self.stdout.write(f"  admin / {password}  (staff: the admin and every tenant)")
            self.stdout.write(f"  acme-owner / {password}  (the tenant portal at /t/acme/; also acme-operator, "
                              "acme-viewer, globex-owner, ... with the same password)")
        else:
            self.stdout.write("The demo users already exist; their passwords are unchanged.")
