"""Management commands: seed_demo (idempotent, complete) and issue_token (prints a working token once)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from apps.catalog.models import Model, Runtime
from apps.clusters.models import Cluster
from apps.core.models import AuditEntry
from apps.serving.models import InferenceService, Pool
from apps.serving.rollout_spec import canary_steps
from apps.tenancy.models import ApiToken, Membership, Tenant


def seed(**kwargs) -> str:
    out = StringIO()
    call_command("seed_demo", stdout=out, **kwargs)
    return out.getvalue()


def table_counts() -> dict[str, int]:
    tables = (get_user_model(), Tenant, Membership, Model, Runtime, Cluster, InferenceService, Pool, AuditEntry)
    return {t.__name__: t.objects.count() for t in tables}


@pytest.fixture
def seeded(db, monkeypatch):
    monkeypatch.setenv("KUBESIM_URL", "http://127.0.0.1:16443")
    seed(password="demo-pass-123")


def test_seed_demo_is_idempotent(seeded):
    before = table_counts()
    seed(password="demo-pass-123")
    assert table_counts() == before


def test_seed_demo_covers_every_mode_and_both_engines(seeded):
    services = InferenceService.objects.select_related("runtime")
    assert {s.deployment_mode for s in services} == {"standard", "pd_disaggregated", "multi_node", "serverless"}
    assert {s.runtime.engine for s in services} == {"vllm", "sglang"}
    for service in services:
        service.full_clean()  # the demo itself obeys every rule


def test_seed_demo_catalog_has_the_reference_architecture_facts(seeded):
    llama70 = Model.objects.get(name="llama-3-1-70b-instruct")
    assert (llama70.layers, llama70.hidden_size, llama70.attention_heads, llama70.kv_heads) == (80, 8192, 64, 8)
    mixtral = Model.objects.get(name="mixtral-8x7b-instruct-v0-1")
    assert (mixtral.parameters_billions, mixtral.active_parameters_billions) == (46.7, 12.9)
    assert Model.objects.count() == 9  # the eight of capacity.known and the generated tiny Llama
    assert set(Runtime.objects.values_list("image", flat=True)) == {"vllm/vllm-openai", "lmsysorg/sglang"}


def test_seed_demo_creates_users_with_every_role_and_a_simulator_cluster(seeded):
    for slug in ("acme", "globex"):
        roles = set(Membership.objects.filter(tenant__slug=slug).values_list("role", flat=True))
        assert roles == {"owner", "operator", "viewer"}
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_staff and admin.check_password("demo-pass-123")
    cluster = Cluster.objects.get(name="kubesim")
    assert (cluster.api_url, cluster.insecure_simulator) == ("http://127.0.0.1:16443", True)


def test_seed_demo_is_audited_as_a_command(seeded):
    service = InferenceService.objects.first()
    entry = AuditEntry.objects.get(object_id=str(service.pk), content_type__model="inferenceservice")
    assert (entry.via, entry.action, entry.actor_repr) == ("command", "create", "command:seed_demo")


def issue(*args) -> str:
    out = StringIO()
    call_command("issue_token", *args, stdout=out, stderr=StringIO())
    return out.getvalue().strip()


def test_issue_token_prints_a_token_that_authenticates(owner_a, tenant_a):
    plaintext = issue("olivia-owner", "--tenant", "alpha", "--expires-days", "7")
    token = ApiToken.objects.get(user=owner_a)
    assert (token.tenant, token.prefix) == (tenant_a, plaintext[:8])
    assert token.expires_at is not None
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    assert client.get("/api/v1/services/").status_code == 200
    entry = AuditEntry.objects.get(object_id=str(token.pk), content_type__model="apitoken")
    assert (entry.via, entry.after["key_hash"]) == ("command", "<redacted>")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["nobody"], "No user named"),
        (["olivia-owner", "--tenant", "nope"], "No tenant"),
        (["olivia-owner", "--tenant", "bravo"], "not a member"),
        (["olivia-owner", "--expires-days", "0"], "at least 1"),
    ],
)
def test_issue_token_refuses_bad_input_without_writing(owner_a, tenant_b, args, says):
    with pytest.raises(CommandError, match=says):
        issue(*args)
    assert ApiToken.objects.count() == 0


def test_seed_demo_never_changes_an_existing_users_password(seeded):
    admin = get_user_model().objects.get(username="admin")
    admin.set_password("chosen-by-the-admin-42")
    admin.save()

    said = seed(password="another-demo-pass")

    admin.refresh_from_db()
    assert admin.check_password("chosen-by-the-admin-42")
    assert get_user_model().objects.get(username="acme-owner").check_password("demo-pass-123")
    assert "another-demo-pass" not in said
    assert "unchanged" in said


def test_seed_demo_takes_the_password_from_demo_password(db, monkeypatch):
    monkeypatch.setenv("DEMO_PASSWORD", "from-the-environment-7")

    said = seed()

    assert get_user_model().objects.get(username="admin").check_password("from-the-environment-7")
    assert "admin / from-the-environment-7" in said


def test_seed_demo_generates_a_password_and_prints_it_once(db, monkeypatch):
    monkeypatch.delenv("DEMO_PASSWORD", raising=False)

    first = seed()
    second = seed()

    printed = first.split("admin / ", 1)[1].split()[0]
    assert len(printed) >= 16
    assert printed != "controlplane-demo"
    admin = get_user_model().objects.get(username="admin")
    assert admin.check_password(printed)
    assert get_user_model().objects.get(username="globex-viewer").check_password(printed)
    assert printed not in second
    assert admin.check_password(printed)


def test_seed_demo_has_a_service_with_a_kv_cache_cpu_tier(seeded):
    rag = InferenceService.objects.get(name="llama-8b-rag")
    assert rag.engine_settings["kv_offload"] == {"backend": "native", "size_gib": 16}
    rag.full_clean()


def test_seed_demo_gives_the_chat_service_a_canary_strategy_and_a_newer_runtime_to_roll_out(seeded):
    chat = InferenceService.objects.get(tenant__slug="acme", name="llama-8b-chat")
    assert [s["weight"] for s in canary_steps(chat.rollout)] == [10, 50, 100]
    assert Runtime.objects.get(name="vllm-0-34").tag == "v0.34.0"
    assert InferenceService.objects.get(tenant__slug="acme", name="llama-8b-rag").rollout == {"strategy": "rolling"}
