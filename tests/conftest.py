"""Shared fixtures. Tests run against real PostgreSQL (DATABASE_URL) and, where marked, a real broker.

Under pytest-xdist (`make test` runs `-n auto`-like workers, docs/tests.md) every worker is isolated here, not in
each test: pytest-django gives it its own database (`test_<name>_gw<N>`), kubesim and the processes the fixtures
start listen on free ports, its Celery tasks go to queues of its own (`xdist_celery_queues`), and the tests that
use the real vLLM run on one worker (`pytest_itemcollected`), so one engine runs at a time.

Actors: tenant A (`alpha`) has an owner, an operator and a viewer; tenant B (`bravo`) has one owner;
`staff` is platform staff. `api(actor)` gives a DRF client authenticated with a real bearer token
(or none for "anonymous", an expired or a revoked token for those actors).
"""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from cryptography.fernet import Fernet
from django.conf import settings as django_settings
from django.utils import timezone
from rest_framework.test import APIClient

from apps.core.choices import Role
from tests.factories import MembershipFactory, TenantFactory, UserFactory, issue_token

# The xdist group of the tests that use the session's real vLLM: `--dist loadgroup` runs them on one worker, so one
# real engine (3 GB, most of a core while it loads) runs at a time however many workers there are.
REAL_ENGINE_GROUP = "real-engine"

ACTORS = ("owner_a", "operator_a", "viewer_a", "member_b", "staff", "anonymous", "expired_token", "revoked_token")


def pytest_itemcollected(item):
    # As each test is collected, before any pytest_collection_modifyitems (xdist's reads the groups there).
    if "real_engine" in getattr(item, "fixturenames", ()):
        item.add_marker(pytest.mark.real_engine)  # a lane of its own: `-m real_engine`, `-m "not real_engine"`
        item.add_marker(pytest.mark.xdist_group(REAL_ENGINE_GROUP))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """`--dist loadgroup` reads a test's group from the `@group` suffix of its node id. pytest-xdist 3.8 writes that
    suffix into `item._nodeid`, which pytest 9 no longer reads (the id is `item._id`): written here instead, so the
    groups hold on this pytest. A no-op once xdist's own suffix shows in the node id."""
    if not config.getoption("loadgroup", default=False):
        return
    from _pytest.nodeid import coerce_node_id

    for item in items:
        groups = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                         for m in item.iter_markers("xdist_group")})
        suffix = "@" + "_".join(groups)
        if groups and not item.nodeid.endswith(suffix):
            item._id = coerce_node_id(item.nodeid + suffix)


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix, django_db_blocker):
    """Under xdist, every worker's test database is created from one migrated template (tests/template_db.py)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    from tests.template_db import template_for

    default = django_settings.DATABASES["default"]  # the dict the connection reads (pytest-django's suffix is set)
    with django_db_blocker.unblock():
        default.setdefault("TEST", {})["TEMPLATE"] = template_for(default)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """The test database, whose commits do not wait for the disk (`synchronous_commit = off` on the database, so
    every connection to it has it, the processes a test starts too): a commit is visible to every other session
    at once as before, only a crash of PostgreSQL could lose the last ones, which a test database never needs.
    A commit took 0.6 to 2 ms on this machine's disk with the flush and 0.06 ms without."""
    from django.db import connection

    with django_db_blocker.unblock(), connection.cursor() as cursor:
        name = connection.ops.quote_name(connection.settings_dict["NAME"])
        cursor.execute(f"ALTER DATABASE {name} SET synchronous_commit TO off")
        cursor.execute("SET synchronous_commit TO off")  # this connection, opened before the ALTER
    yield


@pytest.fixture(scope="session", autouse=True)
def seeded_rows_outlive_a_flush():
    """A transactional test ends by flushing the database, which also removes the rows the migrations seed (the
    platform's priority classes). Django sends `post_migrate` after a flush to put back content types and
    permissions; the seeded classes are put back the same way here, so a test does not see a different database
    for having run after a transactional test on the same worker."""
    from django.db.models.signals import post_migrate

    def reseed(sender, using="default", **kwargs):
        if sender.label != "tenancy":
            return
        from apps.tenancy.choices import DEFAULT_PRIORITY_CLASSES
        from apps.tenancy.models import PriorityClass

        for name, value, description in DEFAULT_PRIORITY_CLASSES:
            PriorityClass.objects.using(using).get_or_create(
                name=name, defaults={"value": value, "description": description})

    post_migrate.connect(reseed, dispatch_uid="tests-reseed-priority-classes")
    yield
    post_migrate.disconnect(dispatch_uid="tests-reseed-priority-classes")


@pytest.fixture(scope="session", autouse=True)
def xdist_celery_queues():
    """Under xdist, this worker's Celery queues carry its id as a prefix (`gw0-reconcile`, ...), in the test
    process and, through CELERY_QUEUE_PREFIX, in every process a test starts: a task one worker enqueues is
    never consumed by a Celery worker another xdist worker started. (The `workers` fixture narrows this to a
    prefix per test.)"""
    worker_id = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ...; unset in a serial run
    if not worker_id:
        yield
        return
    from controlplane import tasknames
    from controlplane.celery import app

    prefix = f"{worker_id}-"
    saved = (os.environ.get("CELERY_QUEUE_PREFIX"), app.conf.task_routes, app.conf.task_default_queue)
    os.environ["CELERY_QUEUE_PREFIX"] = prefix
    django_settings.CELERY_QUEUE_PREFIX = prefix
    app.conf.task_routes = tasknames.routes(prefix)
    app.conf.task_default_queue = prefix + "default"
    reroute(app)
    yield
    if saved[0] is None:
        os.environ.pop("CELERY_QUEUE_PREFIX", None)
    else:
        os.environ["CELERY_QUEUE_PREFIX"] = saved[0]
    app.conf.task_routes, app.conf.task_default_queue = saved[1:]
    reroute(app)


def reroute(app) -> None:
    """Make the Celery app's router read the (changed) task_routes again; it caches them."""
    app.amqp._rtable = None
    app.amqp.router = app.amqp.Router()


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
    """The platform's priority classes as issue 40 names them, by name: seeded by the migration, and again after
    every flush (`seeded_rows_outlive_a_flush`)."""
    from apps.tenancy.models import PriorityClass

    return {name: PriorityClass.objects.get(name=name) for name in ("production", "standard", "best-effort", "batch")}


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
def tiny_models(tmp_path_factory):
    """The tiny model and its two adapters (tests/realengine.py), written once per session."""
    from tests.realengine import make_models

    return make_models(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def real_engine(tiny_models):
    """The session's one real vLLM on a kubesim cpu-real node (tests/realengine.py), started on first use."""
    from tests.realengine import start_engine
    from tests.simcluster import cluster_starter

    models = tiny_models
    with cluster_starter() as make:
        cluster = make(nodes="cpu-real:1,cpu:1", fast_start=True, models_dir=str(models), pod_network="loopback")
        yield start_engine(cluster, models)
