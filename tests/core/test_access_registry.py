"""The access rule, checked for every project model the registry holds, so a model added without one fails.

Rows are made generically from each model's required fields, so a new tenant-owned model is covered by
the isolation tests the day it declares its rule; `make_row` names the related model it cannot fill.
"""

from __future__ import annotations

import itertools
import uuid

import pytest
from django.apps import apps as registry
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.utils import timezone

from apps.catalog.models import Model, Runtime
from apps.clusters.models import Cluster
from apps.core.access import ACTIONS, CHANGE, DELETE, VIEW, allowed, rule_of
from apps.core.choices import Role
from apps.gateway.models import Batch
from apps.rollouts.models import Rollout
from apps.serving.models import InferenceService
from apps.tenancy.models import Tenant, TenantQueue
from apps.whatif.models import Run as WhatIfRun
from tests.factories import (
    ClusterFactory,
    InferenceServiceFactory,
    MembershipFactory,
    ModelFactory,
    RuntimeFactory,
    TenantFactory,
    UserFactory,
)

PROJECT_MODELS = sorted(
    (m for m in registry.get_models() if m.__module__.startswith("apps.")), key=lambda m: m._meta.label
)
TENANT_OWNED = [m for m in PROJECT_MODELS if (rule_of(m) and rule_of(m).tenant)]
STAFF_ONLY = [m for m in PROJECT_MODELS if (rule_of(m) and not rule_of(m).tenant)]
ROLES = [Role.OWNER, Role.OPERATOR, Role.VIEWER]

# Who changes and deletes a tenant's rows, stated here independently of the rules: owners and operators,
# except where the product says otherwise.
OWNERS_ONLY = {"tenancy.Tenant", "tenancy.Membership", "tenancy.ApiToken"}
# Tenant limits are set by staff like the GPU quota; usage rows are written by the gateway alone.
NOBODY_BUT_STAFF = {
    "core.AuditEntry", "catalog.TenantImageRegistry", "gateway.TenantLimits", "gateway.UsageRow", "gateway.UsageHour",
    "gateway.Upstream",  # where the gateway sends a service's requests: the telemetry cycle writes it
    "whatif.Calibration",  # the lab's record of its own error: the worker writes it, nobody edits it
    "whatif.EngineFit",  # coefficients fitted by `manage.py calibrate` from stored telemetry, audited there
    "tenancy.TenantQueue",  # a tenant's GPU quota and how it shares it: staff set it
    # Batch API files and a running batch's lines: written by the gateway through its own door, never through the ORM
    "gateway.File", "gateway.BatchLine",
}

_serial = itertools.count()


def expected_writers(model) -> set:
    label = model._meta.label
    if label in NOBODY_BUT_STAFF:
        return set()
    return {Role.OWNER} if label in OWNERS_ONLY else {Role.OWNER, Role.OPERATOR}


def _related_value(field, tenant):
    target = field.related_model
    makers = {
        Tenant: lambda: tenant,
        InferenceService: lambda: InferenceServiceFactory(tenant=tenant, pools=[]),
        Cluster: ClusterFactory,
        Model: ModelFactory,
        Runtime: RuntimeFactory,
        get_user_model(): UserFactory,
        ContentType: lambda: ContentType.objects.get_for_model(Tenant),
        Rollout: lambda: make_row(Rollout, tenant),
        Batch: lambda: make_row(Batch, tenant),
        WhatIfRun: lambda: WhatIfRun.objects.create(service=InferenceServiceFactory(tenant=tenant, pools=[]),
                                                    cpu_budget_s=1),
    }
    if target not in makers:
        raise AssertionError(f"make_row cannot fill {field.model.__name__}.{field.name} ({target.__name__})")
    return makers[target]()


def _plain_value(field):
    if field.choices:
        return field.choices[0][0]
    n = next(_serial)
    if isinstance(field, models.BooleanField):
        return False
    if isinstance(field, models.UUIDField):
        return uuid.uuid4()
    if isinstance(field, (models.IntegerField, models.FloatField, models.DecimalField)):
        return 1
    if isinstance(field, models.DateTimeField):
        return timezone.now()
    if isinstance(field, models.JSONField):
        return {}
    if isinstance(field, models.BinaryField):
        return b"r%d" % n
    if isinstance(field, (models.CharField, models.TextField)):
        return f"r{n}"[: field.max_length or 32]
    raise AssertionError(f"make_row cannot fill {field.model.__name__}.{field.name} ({type(field).__name__})")


def make_row(model, tenant):
    """A row of `model` belonging to `tenant` (where it has one), every required field filled."""
    if model is Tenant:
        return tenant
    if model is TenantQueue:
        return tenant.queues.get()  # every tenant has one (the factory's, as the migration gave each)
    values = {}
    for field in model._meta.concrete_fields:
        generated_key = field.primary_key and (isinstance(field, models.AutoField) or field.has_default())
        if generated_key or getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
            continue
        tenant_field = field.is_relation and field.related_model is Tenant
        if not tenant_field and (field.null or field.has_default()):
            continue
        values[field.name] = _related_value(field, tenant) if field.is_relation else _plain_value(field)
    return model.objects.create(**values)


def member(tenant, role):
    return MembershipFactory(user=UserFactory(username=f"member-{next(_serial)}"), tenant=tenant, role=role).user


@pytest.mark.parametrize("model", PROJECT_MODELS, ids=lambda m: m._meta.label)
def test_every_project_model_declares_an_access_rule(model):
    rule = rule_of(model)
    assert rule is not None, f"{model._meta.label} declares no access rule: give it objects = restricted(...)"
    assert rule.tenant or rule.reason, f"{model._meta.label} is staff-only without saying why"


def test_the_registry_holds_tenant_owned_and_staff_only_models():
    # Guards the generated tests below against an empty parametrization.
    labels = {m._meta.label for m in TENANT_OWNED}
    assert {"serving.InferenceService", "autoscaling.ScalingDecision", "telemetry.SeriesPoint"} <= labels
    assert {"clusters.Cluster", "clusters.GpuNode"} <= {m._meta.label for m in STAFF_ONLY}


@pytest.mark.django_db
@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("model", TENANT_OWNED, ids=lambda m: m._meta.label)
def test_a_member_acts_only_on_their_tenants_rows(model, action, role):
    tenant_a, tenant_b = TenantFactory(), TenantFactory()
    user = member(tenant_a, role)
    row_a, row_b = make_row(model, tenant_a), make_row(model, tenant_b)

    seen = set(model.objects.restrict(user, action).filter(pk__in=[row_a.pk, row_b.pk]).values_list("pk", flat=True))

    may = action == VIEW or role in expected_writers(model)
    assert seen == ({row_a.pk} if may else set())
    assert allowed(user, row_a, action) is may
    assert allowed(user, row_b, action) is False


@pytest.mark.django_db
@pytest.mark.parametrize("action", [CHANGE, DELETE])
@pytest.mark.parametrize("model", TENANT_OWNED, ids=lambda m: m._meta.label)
def test_a_viewer_never_changes_or_deletes(model, action):
    tenant = TenantFactory()
    viewer = member(tenant, Role.VIEWER)
    row = make_row(model, tenant)
    assert not model.objects.restrict(viewer, action).filter(pk=row.pk).exists()
    assert allowed(viewer, row, action) is False


@pytest.mark.django_db
@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("model", STAFF_ONLY, ids=lambda m: m._meta.label)
def test_staff_only_rows_reach_staff_and_no_member(model, action):
    tenant = TenantFactory()
    row = make_row(model, tenant)
    staff = UserFactory(is_staff=True)
    for role in ROLES:
        assert not model.objects.restrict(member(tenant, role), action).filter(pk=row.pk).exists()
    assert list(model.objects.restrict(staff, action).filter(pk=row.pk)) == [row]
    assert allowed(staff, row, action) is True


@pytest.mark.django_db
@pytest.mark.parametrize("model", PROJECT_MODELS, ids=lambda m: m._meta.label)
def test_anonymous_users_get_no_rows(model):
    from django.contrib.auth.models import AnonymousUser

    make_row(model, TenantFactory())
    assert not model.objects.restrict(AnonymousUser(), VIEW).exists()


@pytest.mark.django_db
def test_an_unknown_action_is_refused_by_name():
    user = member(TenantFactory(), Role.OWNER)
    with pytest.raises(ValueError, match="action must be one of view, change, delete, not 'edit'"):
        InferenceService.objects.restrict(user, "edit")


@pytest.mark.django_db
def test_a_tenant_bound_token_narrows_a_member_of_two_tenants_to_one():
    tenant_a, tenant_b = TenantFactory(), TenantFactory()
    user = member(tenant_a, Role.OWNER)
    MembershipFactory(user=user, tenant=tenant_b, role=Role.OWNER)
    service_a, service_b = InferenceServiceFactory(tenant=tenant_a), InferenceServiceFactory(tenant=tenant_b)
    user.token_tenant_id = tenant_b.pk
    assert list(InferenceService.objects.restrict(user, CHANGE)) == [service_b]
    assert allowed(user, service_a, VIEW) is False

