"""Shared fixtures. Tests run against real PostgreSQL (DATABASE_URL) and, where marked, a real broker.

Actors: tenant A (`alpha`) has an owner, an operator and a viewer; tenant B (`bravo`) has one owner;
`staff` is platform staff. `api(actor)` gives a DRF client authenticated with a real bearer token
(or none for "anonymous", an expired or a revoked token for those actors).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from cryptography.fernet import Fernet
from django.utils import timezone
from rest_framework.test import APIClient

from apps.core.choices import Role
from tests.factories import MembershipFactory, TenantFactory, UserFactory, issue_token

ACTORS = ("owner_a", "operator_a", "viewer_a", "member_b", "staff", "anonymous", "expired_token", "revoked_token")


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    # The production hasher is deliberately slow; tests create many users.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def encryption_key(settings):
    # `make test` may run without FIELD_ENCRYPTION_KEY; a throw-away key per test is enough then.
    if not settings.FIELD_ENCRYPTION_KEYS:
        settings.FIELD_ENCRYPTION_KEYS = [Fernet.generate_key().decode()]


@pytest.fixture(autouse=True)
def fresh_throttles():
    # Throttle counts live in the (per-process) cache; each test starts with full budgets.
    from django.core.cache import cache

    cache.clear()


@pytest.fixture
def make_cluster():
    """`make_cluster(nodes=..., faults=..., fast_start=..., routing_policies=..., seed=...)` starts a simulated
    kubesim cluster (tests/simcluster.py) and returns its handle; every cluster is stopped after the test."""
    from tests.simcluster import cluster_starter  # kubesim is imported only by the tests that start one
    from workers.kube import close_all

    with cluster_starter() as make:
        yield make
        close_all()  # the process's cluster clients and their watch caches go with the clusters


@pytest.fixture
def tenant_a(db):
    return TenantFactory(slug="alpha", name="Alpha Team", gpu_quota=64)


@pytest.fixture
def tenant_b(db):
    return TenantFactory(slug="bravo", name="Bravo Team", gpu_quota=64)


@pytest.fixture
def classes(db):
    """The platform's priority classes as issue 40 names them, by name. The migration seeds them; a database
    flushed by a transactional test may not have them, so they are made here when missing."""
    from apps.tenancy.models import PriorityClass

    found = {}
    for name, value in (("production", 1000), ("standard", 100), ("best-effort", 0), ("batch", -10)):
        found[name], _ = PriorityClass.objects.get_or_create(name=name, defaults={"value": value})
    return found


def _member(tenant, username, role):
    return MembershipFactory(user=UserFactory(username=username), tenant=tenant, role=role).user


@pytest.fixture
def owner_a(tenant_a):
    return _member(tenant_a, "olivia-owner", Role.OWNER)


@pytest.fixture
def operator_a(tenant_a):
    return _member(tenant_a, "oscar-operator", Role.OPERATOR)


@pytest.fixture
def viewer_a(tenant_a):
    return _member(tenant_a, "vera-viewer", Role.VIEWER)


@pytest.fixture
def member_b(tenant_b):
    return _member(tenant_b, "boris-bravo", Role.OWNER)


@pytest.fixture
def staff(db):
    return UserFactory(username="sam-staff", is_staff=True, is_superuser=True)


@pytest.fixture
def api(request, db):
    """api(actor_name) → an APIClient acting as that actor through `Authorization: Bearer`."""

    def make(actor: str) -> APIClient:
        client = APIClient()
        if actor == "anonymous":
            return client
        if actor in ("expired_token", "revoked_token"):
            user = request.getfixturevalue("owner_a")
            token, plaintext = issue_token(user, name=actor)
            if actor == "expired_token":
                token.expires_at = timezone.now() - timedelta(minutes=1)
            else:
                token.revoked_at = timezone.now()
            token.save()
        else:
            user = request.getfixturevalue(actor)
            _, plaintext = issue_token(user, name=f"{actor}-test")
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
        return client

    return make


@pytest.fixture(scope="session")
def real_engine(tmp_path_factory):
    """The session's one real vLLM on a kubesim cpu-real node (tests/realengine.py), started on first use."""
    from tests.realengine import make_models, start_engine
    from tests.simcluster import cluster_starter

    models = make_models(tmp_path_factory.mktemp("models"))
    with cluster_starter() as make:
        cluster = make(nodes="cpu-real:1,cpu:1", fast_start=True, models_dir=str(models), pod_network="loopback")
        yield start_engine(cluster, models)
