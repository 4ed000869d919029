"""The catalog: base models, LoRA adapters and engine runtimes, platform-wide or tenant-private."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import F, Q

from apps.catalog.choices import DeploymentMode, EngineKind, KvLayout, ModelDtype
from apps.catalog.engines import EngineSettings, get_adapter
from apps.catalog.registries import (
    PREFIX_HELP,
    REPOSITORY_HELP,
    TAG_HELP,
    image_allowed,
    is_valid_prefix,
    is_valid_repository,
    is_valid_tag,
)
from apps.catalog.validators import validate_source_uri
from apps.core.access import RestrictedQuerySet, restricted, tenant_owned
from apps.core.models import TimestampedModel
from apps.core.validators import dns1123_label


class CatalogQuerySet(RestrictedQuerySet):
    """Everyone signed in sees the platform-wide entries plus their tenants' private ones."""

    rule = tenant_owned("tenant", platform_wide=True)

    def usable_by_tenant(self, tenant_id: int | None) -> CatalogQuerySet:
        return self.filter(Q(tenant__isnull=True) | Q(tenant_id=tenant_id))

    def named_for_tenant(self, tenant_id: int | None, name: str):
        """The entry of this name the tenant may use (its own before a platform-wide one), or None."""
        return self.usable_by_tenant(tenant_id).filter(name=name).order_by(F("tenant_id").asc(nulls_last=True)).first()


class CatalogEntry(TimestampedModel):
    """Abstract: a named entry that is platform-wide (tenant empty) or private to one tenant."""

    tenant = models.ForeignKey(
        "tenancy.Tenant",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="%(class)ss",
        help_text="Empty for a platform-wide entry.",
    )
    name = models.CharField(max_length=63, validators=[dns1123_label])

    objects = CatalogQuerySet.as_manager()

    class Meta:
        abstract = True
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.tenant}/{self.name}" if self.tenant_id else self.name

    @property
    def is_platform_wide(self) -> bool:
        return self.tenant_id is None

    def clean(self) -> None:
        errors: dict[str, list] = {}
        if self.name:
            clash = type(self).objects.filter(tenant_id=self.tenant_id, name=self.name).exclude(pk=self.pk)
            if clash.exists():
                scope = f"tenant {self.tenant}" if self.tenant_id else "the platform catalog"
                message = f"The name {self.name!r} is already used in {scope}."
                errors["name"] = [ValidationError(message, code="unique")]
        self.clean_entry(errors)
        if errors:
            raise ValidationError(errors)

    def clean_entry(self, errors: dict[str, list]) -> None:
        """Hook: add this kind's own problems to `errors` (field name → messages)."""


    @classmethod
    def unique_name_constraint(cls, label: str) -> models.UniqueConstraint:
        return models.UniqueConstraint(fields=["tenant", "name"], nulls_distinct=False, name=f"{label}_unique_name")


class Model(CatalogEntry):
    """A base model with the architecture facts that drive capacity planning."""

    display_name = models.CharField(max_length=200, blank=True)
    source_uri = models.CharField(max_length=500, validators=[validate_source_uri])
    license = models.CharField(max_length=100, blank=True)
    parameters_billions = models.FloatField(validators=[MinValueValidator(0.001)])
    active_parameters_billions = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.001)],
        help_text="For mixture-of-experts models: parameters used per token.",
    )
    layers = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    hidden_size = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    attention_heads = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    kv_heads = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    head_dim = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    max_context = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    dtype = models.CharField(max_length=16, choices=ModelDtype.choices, default=ModelDtype.BFLOAT16)
    # The one record of a model's KV layout: vLLM's KV offloading refuses MLA and hybrid layouts
    # (apps/catalog/kvoffload.py), and config.json import reads it (apps/catalog/hfconfig.py).
    kv_layout = models.CharField(max_length=16, choices=KvLayout.choices, default=KvLayout.UNIFORM,
                                 help_text="MLA and hybrid-attention models cannot use vLLM's KV offloading.")

    class Meta(CatalogEntry.Meta):
        constraints = [CatalogEntry.unique_name_constraint("catalog_model")]

    def clean_entry(self, errors: dict[str, list]) -> None:
        if self.attention_heads and self.kv_heads and self.attention_heads % self.kv_heads:
            errors["kv_heads"] = [f"KV heads ({self.kv_heads}) must divide attention heads ({self.attention_heads})."]
        if (
            self.active_parameters_billions
            and self.parameters_billions
            and self.active_parameters_billions > self.parameters_billions
        ):
            errors["active_parameters_billions"] = ["Active parameters cannot exceed total parameters."]


class Adapter(CatalogEntry):
    """A LoRA adapter on a base model; served by services of that model."""

    base_model = models.ForeignKey(Model, on_delete=models.PROTECT, related_name="adapters")
    source_uri = models.CharField(max_length=500, validators=[validate_source_uri])
    rank = models.PositiveIntegerField(validators=[MinValueValidator(1)])

    class Meta(CatalogEntry.Meta):
        constraints = [CatalogEntry.unique_name_constraint("catalog_adapter")]

    def clean_entry(self, errors: dict[str, list]) -> None:
        if self.base_model_id and self.base_model.tenant_id not in (None, self.tenant_id):
            errors["base_model"] = ["The base model must be platform-wide or belong to the adapter's tenant."]


def default_modes() -> list[str]:
    return [DeploymentMode.STANDARD]


class Runtime(CatalogEntry):
    """An engine build: engine kind, container image and tag, default args, supported modes."""

    engine = models.CharField(max_length=16, choices=EngineKind.choices)
    image = models.CharField(max_length=300, help_text="Repository without tag, e.g. vllm/vllm-openai.")
    tag = models.CharField(max_length=128)
    default_args = models.JSONField(default=list, blank=True, help_text="Extra engine arguments, a list of strings.")
    supported_modes = ArrayField(models.CharField(max_length=32, choices=DeploymentMode.choices), default=default_modes)

    class Meta(CatalogEntry.Meta):
        constraints = [CatalogEntry.unique_name_constraint("catalog_runtime")]

    @property
    def image_ref(self) -> str:
        return f"{self.image}:{self.tag}"

    def clean_entry(self, errors: dict[str, list]) -> None:
        if not isinstance(self.default_args, list) or not all(isinstance(a, str) for a in self.default_args):
            errors["default_args"] = ["Default args must be a list of strings."]
        elif self.engine and self.default_args:
            # Platform-only flags (remote code, plugins, paths) only on platform-wide runtimes, which only
            # staff write (audited); a tenant's private runtime gets the tenants' policy.
            adapter = get_adapter(self.engine)
            clash = (adapter.validate_default_args(self.default_args, tag=self.tag) if self.tenant_id is None
                     else adapter.validate(EngineSettings(extra_args=tuple(self.default_args)),
                                           tag=self.tag).get("extra_args"))
            if clash:
                errors["default_args"] = [clash]
        if self.tag and not is_valid_tag(self.tag):
            errors["tag"] = [f"{self.tag!r} is not an image tag. {TAG_HELP}"]
        if not self.supported_modes:
            errors["supported_modes"] = ["List at least one deployment mode."]
        elif len(set(self.supported_modes)) != len(self.supported_modes):
            errors["supported_modes"] = ["Deployment modes are listed more than once."]
        if ":" in self.image.rsplit("/", 1)[-1] or "@" in self.image:
            errors["image"] = ["Give the image without a tag or digest; the tag has its own field."]
        elif self.image and not is_valid_repository(self.image):
            errors["image"] = [f"{self.image!r} is not an image repository. {REPOSITORY_HELP}"]
        elif self.image:
            allowed = allowed_registries(self.tenant_id)
            if not image_allowed(self.image, allowed):
                errors["image"] = [f"Images may come only from these registries: {', '.join(allowed)}."]


def allowed_registries(tenant_id: int | None) -> list[str]:
    """The platform list (`IMAGE_REGISTRIES`) plus the tenant's own additions, in that order."""
    extra = []
    if tenant_id is not None:
        extra = list(TenantImageRegistry.objects.filter(tenant_id=tenant_id).values_list("prefix", flat=True))
    return list(dict.fromkeys([*settings.IMAGE_REGISTRIES, *extra]))


class TenantImageRegistry(models.Model):
    """A registry (host with an optional path) staff allow for one tenant's runtime images, on top of
    the platform list. Managed by staff in the admin only."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="image_registries")
    prefix = models.CharField(max_length=255, help_text=PREFIX_HELP)

    # Staff decide which registries a tenant may pull from; its members may read them.
    objects = restricted(tenant_owned("tenant", writers=frozenset()))

    class Meta:
        ordering = ["tenant__slug", "prefix"]
        constraints = [models.UniqueConstraint(fields=["tenant", "prefix"], name="catalog_tenant_registry_unique")]

    def __str__(self) -> str:
        return f"{self.tenant}: {self.prefix}"

    def clean(self) -> None:
        self.prefix = (self.prefix or "").strip().lower().rstrip("/")
        if not is_valid_prefix(self.prefix):
            raise ValidationError({"prefix": [f"{self.prefix!r} is not a registry prefix. {PREFIX_HELP}"]})
