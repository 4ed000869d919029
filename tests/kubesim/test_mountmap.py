"""The cpu-real kubelet's path mapping: mounted paths in the pod to the node's models folder, in the command line
and in the lora_path of vLLM's adapter load requests (the middleware the real engine runs with)."""

from __future__ import annotations

import asyncio
import json

from kubesim.engines.mountmap import MOUNTS_ENV, ROOT_ENV, MountMap, map_path

MOUNTS = ["/models", "/models/local/"]


def test_a_path_moves_under_the_folder_by_its_longest_mount():
    assert map_path("/models/local/adapters/a", MOUNTS, "/srv/m") == "/srv/m/adapters/a"
    assert map_path("/models/tiny", MOUNTS, "/srv/m") == "/srv/m/tiny"
    assert map_path("/models", MOUNTS, "/srv/m") == "/srv/m"
    assert map_path("/modelsx/tiny", MOUNTS, "/srv/m") == "/modelsx/tiny"
    assert map_path("acme/sql-lora", MOUNTS, "/srv/m") == "acme/sql-lora"


def _call(path: str, body: bytes, monkeypatch) -> tuple[bytes, dict]:
    monkeypatch.setenv(MOUNTS_ENV, json.dumps(MOUNTS))
    monkeypatch.setenv(ROOT_ENV, "/srv/m")
    seen = {}

    async def app(scope, receive, send):
        message = await receive()
        seen["body"], seen["headers"] = message["body"], dict(scope["headers"])

    chunks = [{"type": "http.request", "body": body[:5], "more_body": True},
              {"type": "http.request", "body": body[5:], "more_body": False}]

    async def receive():
        return chunks.pop(0)

    scope = {"type": "http", "path": path, "headers": [(b"content-length", str(len(body)).encode())]}
    asyncio.run(MountMap(app)(scope, receive, None))
    return seen["body"], seen["headers"]


def test_a_load_request_reaches_the_engine_with_the_path_on_the_node(monkeypatch):
    body = json.dumps({"lora_name": "tiny-sql", "lora_path": "/models/local/adapters/tiny-sql"}).encode()
    seen, headers = _call("/v1/load_lora_adapter", body, monkeypatch)
    assert json.loads(seen) == {"lora_name": "tiny-sql", "lora_path": "/srv/m/adapters/tiny-sql"}
    assert headers[b"content-length"] == str(len(seen)).encode()


def test_other_requests_and_repository_ids_pass_unchanged(monkeypatch):
    body = json.dumps({"lora_name": "sql", "lora_path": "acme/sql-lora"}).encode()
    assert _call("/v1/load_lora_adapter", body, monkeypatch)[0] == body
    completion = json.dumps({"model": "x", "prompt": "/models/local/adapters/tiny-sql"}).encode()
    assert _call("/v1/completions", completion, monkeypatch)[0] == completion[:5]  # the app read one chunk itself
