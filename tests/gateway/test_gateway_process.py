"""`python -m gateway` as a real process on a snapshot written by the control plane, called over HTTP by
the official openai client and by plain requests."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
import uuid

import openai
import pytest
import redis

from apps.gateway.snapshot import write_snapshot
from tests.gateway.conftest import client, issue, post, status_of
from tests.polling import wait_for
from tests.ports import free_port

pytestmark = pytest.mark.django_db


@pytest.fixture
def gateway(world):
    port, prefix = free_port(), f"test:{uuid.uuid4().hex}:"
    # Its own Redis key prefix, so no other run sharing the Redis database (same key ids) is counted in.
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", str(port),
                             "--snapshot", str(world["path"]), "--refresh-seconds", "0.2",
                             "--max-body-bytes", "2048", "--redis-url", "redis://127.0.0.1:6379/11",
                             "--redis-prefix", prefix])
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: status_of(f"{base}/readyz") == 200, timeout=20)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shared = redis.Redis.from_url("redis://127.0.0.1:6379/11")
        for name in shared.scan_iter(f"{prefix}*"):
            shared.delete(name)


def test_models_lists_only_what_the_key_may_call(gateway, world):
    everything = sorted(m.id for m in client(gateway, world["all"]).models.list())
    # The service names, the served model and the adapter; the factory's model of `embed` has its own name.
    assert {"chat", "embed", "llama-8b", "sql-lora"} <= set(everything) and len(everything) == 5
    assert sorted(m.id for m in client(gateway, world["chat_only"]).models.list()) == ["chat", "llama-8b",
                                                                                       "sql-lora"]
    assert "secret-b" not in [m.id for m in client(gateway, world["all"]).models.list()]


@pytest.mark.parametrize("which", ["revoked", "expired"])
def test_revoked_expired_and_unknown_keys_are_401(gateway, world, which):
    for key in (world[which], "sk-not-a-key"):
        with pytest.raises(openai.AuthenticationError) as caught:
            client(gateway, key).models.list()
        assert caught.value.code == "invalid_api_key"


def test_another_tenants_model_is_404_like_one_that_does_not_exist(gateway, world):
    answers = []
    for model in ("secret-b", "no-such-model"):
        with pytest.raises(openai.NotFoundError) as caught:
            client(gateway, world["all"]).chat.completions.create(model=model, messages=[])
        assert caught.value.code == "model_not_found"
        answers.append(caught.value.body["message"].replace(model, "X"))
    assert answers[0] == answers[1]
    # The key limited to `chat` does not reach the tenant's other service either.
    with pytest.raises(openai.NotFoundError):
        client(gateway, world["chat_only"]).completions.create(model="embed", prompt="hi")


def test_malformed_and_oversized_bodies(gateway, world):
    status, _, body = post(gateway, world["all"], b"{not json")
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
    status, _, body = post(gateway, world["all"], json.dumps({"model": "chat"}).encode())
    assert status == 400 and body["error"]["param"] == "messages"
    status, _, body = post(gateway, world["all"], json.dumps({"model": "chat", "messages": ["x" * 3000]}).encode())
    assert status == 413 and set(body["error"]) == {"message", "type", "param", "code"}


def test_no_ready_replica_is_503_with_retry_after(gateway, world):
    status, headers, body = post(gateway, world["all"],
                                 json.dumps({"model": "sql-lora", "messages": [{"role": "user", "content": "hi"}]})
                                 .encode())
    assert status == 503 and int(headers["retry-after"]) > 0
    assert body["error"]["code"] == "no_ready_replica"


def test_a_new_key_works_after_the_next_snapshot_and_metrics_count(gateway, world, tenant_a):
    _, fresh = issue(tenant_a, "fresh")
    with pytest.raises(openai.AuthenticationError):
        client(gateway, fresh).models.list()
    write_snapshot(world["path"])
    wait_for(lambda: known(gateway, fresh), timeout=5)
    with urllib.request.urlopen(f"{gateway}/metrics", timeout=2) as response:
        text = response.read().decode()
    assert 'gateway_requests_total{route="/v1/models",status="401"}' in text


def known(base, key) -> bool:
    try:
        return len(list(client(base, key).models.list())) == 5
    except openai.AuthenticationError:
        return False


def test_the_gateway_loads_without_django():
    code = "import sys, gateway.app, gateway.__main__; assert 'django' not in sys.modules, 'django imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
    help_run = subprocess.run([sys.executable, "-m", "gateway", "--help"], capture_output=True, text=True,
                              timeout=30)
    assert help_run.returncode == 0 and "--port" in help_run.stdout and "--snapshot" in help_run.stdout


def test_requests_per_minute_answer_429_with_openais_headers(gateway, world):
    body = json.dumps({"model": "chat", "messages": [{"role": "user", "content": "hi"}]}).encode()
    answers = [post(gateway, world["limited"], body) for _ in range(2)]
    assert [headers["x-ratelimit-remaining-requests"] for _, headers, _ in answers] == ["1", "0"]
    assert all(headers["x-ratelimit-limit-requests"] == "2" for _, headers, _ in answers)
    with pytest.raises(openai.RateLimitError) as caught:
        client(gateway, world["limited"]).chat.completions.create(model="chat", messages=[])
    assert caught.value.code == "rate_limit_exceeded"
    assert 1 <= int(caught.value.response.headers["retry-after"]) <= 60
    # A key without limits is not slowed by another key's.
    assert post(gateway, world["all"], body)[0] == 503


def test_token_limits_and_budgets_answer_with_openais_headers_and_codes(gateway, world, tenant_a):
    from apps.gateway.models import InferenceKey, TenantLimits

    tokens, tokens_key = issue(tenant_a, "tokens")
    budget, budget_key = issue(tenant_a, "budget")
    InferenceKey.objects.filter(pk=tokens.pk).update(tpm=100, rpm=50)
    InferenceKey.objects.filter(pk=budget.pk).update(monthly_token_budget=60)
    TenantLimits.objects.create(tenant=tenant_a, concurrency=500)
    write_snapshot(world["path"])
    for key in (tokens_key, budget_key):
        wait_for(lambda key=key: post(gateway, key, b"{}")[0] == 400, timeout=5)
    # 40 characters of prompt ≈ 10 tokens, plus 4 for the message, plus 30 reserved for the completion.
    body = json.dumps({"model": "chat", "max_tokens": 30, "messages": [{"role": "user", "content": "x" * 40}]})
    status, headers, _ = post(gateway, tokens_key, body.encode())
    assert status == 503 and headers["x-ratelimit-limit-tokens"] == "100"
    # The request reached no engine, so it was settled at zero: the window is whole again.
    assert headers["x-ratelimit-remaining-tokens"] == "56" and headers["x-ratelimit-limit-requests"] == "50"
    assert headers["x-ratelimit-reset-tokens"].endswith("s")
    big = json.dumps({"model": "chat", "max_tokens": 200, "messages": []})
    with pytest.raises(openai.RateLimitError) as caught:
        client(gateway, tokens_key).chat.completions.create(model="chat", messages=[], max_tokens=200)
    assert caught.value.code == "rate_limit_exceeded" and "tokens" in caught.value.message
    assert post(gateway, tokens_key, big.encode())[1]["x-ratelimit-remaining-tokens"] == "100"
    assert post(gateway, budget_key, body.encode())[0] == 503
    with pytest.raises(openai.RateLimitError) as caught:
        client(gateway, budget_key).chat.completions.create(model="chat", messages=[], max_tokens=61)
    assert caught.value.code == "insufficient_quota" and int(caught.value.response.headers["retry-after"]) > 0
    # Each request let through took one round trip to check and one to settle; each refusal one.
    with urllib.request.urlopen(f"{gateway}/metrics", timeout=2) as response:
        metrics = response.read().decode()
    assert "gateway_redis_round_trips 7.0" in metrics, [line for line in metrics.splitlines() if "round" in line]


def test_the_database_url_can_come_from_a_secrets_file_and_a_missing_one_is_named(tmp_path):
    from gateway.__main__ import parse_args

    secret = tmp_path / "DATABASE_URL"
    secret.write_text("postgres://gw:pw@db:5432/cp\n")
    assert parse_args(["--database-url-file", str(secret)]).database_url == "postgres://gw:pw@db:5432/cp"
    # --database-url wins over the file.
    assert parse_args(["--database-url", "postgres://x/y", "--database-url-file", str(secret)]).database_url \
        == "postgres://x/y"
    out = subprocess.run([sys.executable, "-m", "gateway", "--database-url-file", str(tmp_path / "none")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and f"--database-url-file {tmp_path / 'none'}: No such file or directory" in out.stderr
