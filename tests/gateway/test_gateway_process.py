"""`python -m gateway` as a real process on a snapshot written by the control plane, called over HTTP by
the official openai client and by plain requests."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from contextlib import contextmanager

import openai
import pytest
import redis

from apps.gateway.snapshot import write_snapshot
from tests.gateway.conftest import client, issue, post, status_of
from tests.gateway.fake_engine import engine_in_thread
from tests.gateway.test_no_usage_lost import serve_chat_from
from tests.gateway.test_request_checks import nested
from tests.polling import wait_for
from tests.ports import free_port

pytestmark = pytest.mark.django_db


@contextmanager
def serving(world, *extra: str):
    """A gateway process on the world's snapshot, its limits in Redis; its base URL for the block."""
    port, prefix = free_port(), f"test:{uuid.uuid4().hex}:"
    # Its own Redis key prefix, so no other run sharing the Redis database (same key ids) is counted in.
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", str(port),
                             "--snapshot", str(world["path"]), "--refresh-seconds", "0.2",
                             "--redis-url", "redis://127.0.0.1:6379/11", "--redis-prefix", prefix, *extra])
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


@pytest.fixture
def gateway(world):
    with serving(world, "--max-body-bytes", "2048") as base:
        yield base


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


def call(base: str, path: str, key: str, body, *, authorizations: int = 1, method: str = "POST"):
    """(status, headers, JSON answer or {}) of a request sent with http.client, which can repeat a header."""
    host, port = base.removeprefix("http://").split(":")
    data = (body if isinstance(body, str) else json.dumps(body)).encode()
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.putrequest(method, path)
        for _ in range(authorizations):
            conn.putheader("Authorization", f"Bearer {key}")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(len(data)))
        conn.endheaders(data)
        response = conn.getresponse()
        text = response.read()
        try:
            answer = json.loads(text)
        except ValueError:
            answer = {}
        return response.status, {k.lower(): v for k, v in response.getheaders()}, answer
    finally:
        conn.close()


def limited_key(world, tenant, name: str, **limits) -> str:
    """A new key of `tenant` with `limits`, once the gateway's snapshot has it."""
    from apps.gateway.models import InferenceKey

    row, key = issue(tenant, name)
    InferenceKey.objects.filter(pk=row.pk).update(**limits)
    write_snapshot(world["path"])
    return key


def test_deep_nesting_is_400_not_500(world):
    with serving(world) as base:  # the default body limit: 10,000 levels fit in it
        for body in (nested(10_000), {"model": "chat", "prompt": json.loads(nested(600))}):
            status, _, answer = call(base, "/v1/completions", world["all"], body)
            assert status == 400 and "nested too deeply" in answer["error"]["message"]


def test_two_authorization_headers_are_400_even_when_both_are_the_key(gateway, world):
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
    status, _, answer = call(gateway, "/v1/chat/completions", world["all"], body, authorizations=2)
    assert status == 400 and answer["error"]["code"] == "duplicate_header"
    assert call(gateway, "/v1/models", world["all"], "", authorizations=2, method="GET")[0] == 400
    assert call(gateway, "/v1/chat/completions", world["all"], body)[0] == 503


def test_what_a_request_may_generate_is_reserved_and_lengths_the_engine_ignores_are_400(gateway, world, tenant_a):
    budget = limited_key(world, tenant_a, "budget-200", monthly_token_budget=200)
    tokens = limited_key(world, tenant_a, "tpm-1000", tpm=1000)
    for key in (budget, tokens):
        wait_for(lambda key=key: post(gateway, key, b"{}")[0] == 400, timeout=5)
    completions = "/v1/completions"
    # The engine of /v1/completions generates max_tokens (400 here), whatever max_completion_tokens says.
    status, _, answer = call(gateway, completions, budget, {"model": "chat", "prompt": "abcd", "max_tokens": 400,
                                                            "max_completion_tokens": 1})
    assert status == 400 and answer["error"]["param"] == "max_completion_tokens"
    # Three choices of 100 tokens and the 1-token prompt: 301 reserved, past the budget of 200.
    status, _, answer = call(gateway, completions, budget, {"model": "chat", "prompt": "abcd", "n": 3,
                                                            "max_tokens": 100})
    assert status == 429 and answer["error"]["code"] == "insufficient_quota"
    assert call(gateway, completions, budget, {"model": "chat", "prompt": "abcd", "max_tokens": 100})[0] == 503
    # Two prompts (12 characters: 3 tokens) of two choices of 50 tokens: 203 of the minute's 1,000.
    status, headers, _ = call(gateway, completions, tokens, {"model": "chat", "prompt": ["abcd" * 2, "abcd"],
                                                             "n": 2, "max_tokens": 50})
    assert status == 503 and headers["x-ratelimit-remaining-tokens"] == "797"


def test_a_refused_stream_request_leaves_a_one_at_a_time_key_its_slot(gateway, world, tenant_a):
    key = limited_key(world, tenant_a, "one-at-a-time", concurrency=1)
    body = {"model": "chat", "prompt": "hi", "stream": True}
    with engine_in_thread() as port:
        serve_chat_from(world, tenant_a, port)
        wait_for(lambda: call(gateway, "/v1/completions", key, body)[0] == 200, timeout=5)
        for options in ("x", ["include_usage"]):
            status, _, answer = call(gateway, "/v1/completions", key, {**body, "stream_options": options})
            assert status == 400 and answer["error"]["param"] == "stream_options"
        # At once, and not 429: the key's one slot is free.
        assert call(gateway, "/v1/completions", key, body)[0] == 200
