"""Keyed prefix hashes (issue 45, finding 9): the key comes from a secret (GATEWAY_PREFIX_HASH_KEY, else
SECRET_KEY, each also as a file), gateway replicas sharing it hash a prompt alike, another secret or no key
gives other hashes, and a gateway that meters without any secret refuses to start."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys

import pytest

from apps.gateway.models import UsageRow
from gateway.prefix import KEY_SECRETS, hash_key
from tests.database import database_url_of_test_db
from tests.gateway.fake_engine import engine_in_thread
from tests.gateway.test_no_usage_lost import serve_chat_from, start
from tests.gateway.test_poison_requests import call, stop
from tests.polling import wait_for

PROMPT = "The handbook's first chapter, as every request of this tenant starts. " * 2  # two full chunks


def chain(text: str, **blake2b_key) -> list[int]:
    """The prompt's chained 64-character chunk hashes as docs/gateway.md describes them, keyed or not."""
    hashes, previous = [], b""
    for start_at in range(0, len(text) // 64 * 64, 64):
        previous = hashlib.blake2b(previous + text[start_at:start_at + 64].encode(), digest_size=4,
                                   **blake2b_key).digest()
        hashes.append(int.from_bytes(previous, "big", signed=True))
    return hashes


def test_the_key_is_derived_from_the_gateways_secret_else_the_control_planes(tmp_path):
    assert hash_key({}) is None
    derived = hashlib.blake2b(b"alpha", digest_size=32, person=b"gw-prefix-hash").digest()
    assert hash_key({"GATEWAY_PREFIX_HASH_KEY": "alpha"}) == derived
    assert hash_key({"GATEWAY_PREFIX_HASH_KEY": "alpha", "SECRET_KEY": "beta"}) == derived
    assert hash_key({"SECRET_KEY": "beta"}) not in (None, derived, b"beta")
    secret = tmp_path / "key"
    secret.write_text("alpha\n")
    assert hash_key({"GATEWAY_PREFIX_HASH_KEY_FILE": str(secret), "SECRET_KEY": "beta"}) == derived
    with pytest.raises(ValueError, match=f"GATEWAY_PREFIX_HASH_KEY_FILE={tmp_path / 'none'}: No such file"):
        hash_key({"GATEWAY_PREFIX_HASH_KEY_FILE": str(tmp_path / "none")})
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="is empty"):
        hash_key({"SECRET_KEY_FILE": str(tmp_path / "empty")})


def without_secrets() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in {f"{n}{s}" for n in KEY_SECRETS for s in ("", "_FILE")}}


def test_replicas_sharing_a_secret_hash_alike_and_no_one_can_confirm_a_guess_without_it(transactional_db, world,
                                                                                       tenant_a):
    blocks = []
    with engine_in_thread() as engine_port:
        serve_chat_from(world, tenant_a, engine_port)
        for secret in ("alpha", "alpha", "beta"):  # two replicas of one install, then another install
            proc, _, base = start(world, "--database-url", database_url_of_test_db(), "--usage-flush-seconds",
                                  "0.2", env={**without_secrets(), "GATEWAY_PREFIX_HASH_KEY": secret})
            try:
                assert call(base, world["all"], "/v1/completions", {"model": "chat", "prompt": PROMPT}) == 200
                row = wait_for(lambda: UsageRow.objects.exclude(id__in=[b[0] for b in blocks]).first(),
                               message="the request's usage row")
            finally:
                stop(proc)
            blocks.append((row.id, row.prefix_blocks))
    (_, alpha), (_, again), (_, beta) = blocks
    assert len(alpha) == 2 and alpha == again and beta != alpha
    assert alpha == chain(PROMPT, key=hashlib.blake2b(b"alpha", digest_size=32, person=b"gw-prefix-hash").digest())
    assert chain(PROMPT) not in (alpha, beta)  # the unkeyed hash of a guessed prompt matches nothing stored


def test_a_gateway_that_meters_refuses_to_start_without_a_secret():
    with socket.socket() as taken:  # a port in use: a gateway that got past its options would exit, not serve
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        out = subprocess.run([sys.executable, "-m", "gateway", "--host", "127.0.0.1",
                              "--port", str(taken.getsockname()[1]), "--database-url", "postgres://gw@db/cp"],
                             env=without_secrets(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "set GATEWAY_PREFIX_HASH_KEY (or GATEWAY_PREFIX_HASH_KEY_FILE)" in out.stderr
    assert "Traceback" not in out.stderr
