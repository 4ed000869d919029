"""`manage.py demo_inference_keys DIR`: a demo-load key per tenant for make demo's load through the gateway."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from apps.core.models import AuditEntry
from apps.tenancy.models import Tenant


@pytest.fixture
def seeded(db, monkeypatch):
    monkeypatch.setenv("KUBESIM_URL", "http://127.0.0.1:16443")
    call_command("seed_demo", password="demo-pass-123", stdout=StringIO())


def test_each_tenant_gets_a_load_key_kept_while_its_file_matches(seeded, tmp_path):
    from apps.gateway.models import InferenceKey
    from apps.tenancy.models import hash_token

    call_command("demo_inference_keys", str(tmp_path), stdout=StringIO())
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == sorted(f"{t.slug}.key" for t in Tenant.objects.all())
    acme = (tmp_path / "acme.key").read_text().strip()
    assert (tmp_path / "acme.key").stat().st_mode & 0o777 == 0o600
    key = InferenceKey.objects.get(tenant__slug="acme", name="demo-load")
    assert key.key_hash == hash_token(acme) and key.services.count() == 0  # every service of the tenant
    call_command("demo_inference_keys", str(tmp_path), stdout=StringIO())
    assert InferenceKey.objects.get(tenant__slug="acme", name="demo-load").pk == key.pk
    # A lost file: the same key (its metered usage with it) gets a new secret, and the rotation is audited.
    (tmp_path / "acme.key").unlink()
    call_command("demo_inference_keys", str(tmp_path), stdout=StringIO())
    renewed = InferenceKey.objects.get(tenant__slug="acme", name="demo-load")
    assert renewed.pk == key.pk and renewed.key_hash == hash_token((tmp_path / "acme.key").read_text().strip())
    assert renewed.key_hash != key.key_hash
    rotation = AuditEntry.objects.get(content_type__model="inferencekey", object_id=str(key.pk), action="update")
    assert rotation.actor_repr == "command:demo_inference_keys" and rotation.via == "command"


def test_the_demos_shared_model_name_is_balanced_and_each_service_name_is_its_own(seeded):
    from apps.gateway.snapshot import build_snapshot
    from gateway.names import names_of

    snapshot = build_snapshot()
    acme = Tenant.objects.get(slug="acme").pk
    names = names_of(s for s in snapshot["services"] if s["tenant_id"] == acme)
    # llama-8b-chat and llama-8b-rag both serve llama-3-1-8b-instruct: the model's name names both (balanced),
    # each service's name only itself, which is how the demo's loads (Procfile) call them.
    assert sorted(s["name"] for s in names["llama-3-1-8b-instruct"]) == ["llama-8b-chat", "llama-8b-rag"]
    assert [s["name"] for s in names["llama-8b-chat"]] == ["llama-8b-chat"]
    assert [s["name"] for s in names["llama-8b-rag"]] == ["llama-8b-rag"]
