"""Paths in the pod to paths on a cpu-real node, for the command line and for vLLM's adapter load requests.

A cpu-real node's engine runs on the host, so a path under one of the container's volume mounts is read at the
same path under the node's models folder (`--models-dir`). `map_path` does that for the command line (the kubelet,
kubesim/engines/real.py). `MountMap` is an ASGI middleware the kubelet adds to the real vLLM (its `--middleware`
flag) that does the same for the `lora_path` of `/v1/load_lora_adapter`, so an adapter loaded at run time can be
named by its path in the pod. It reads the mounts and the folder from the environment the kubelet gives the
engine (`MOUNTS_ENV`, `ROOT_ENV`). Standard library only: it runs inside the engine's process.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

MOUNTS_ENV = "KUBESIM_MOUNTS"  # a JSON list of the container's mount paths
ROOT_ENV = "KUBESIM_MODELS_DIR"
LOAD_PATHS = ("/v1/load_lora_adapter",)


def map_path(path: str, mounts: list[str], root: str) -> str:
    """`path` under the longest mount it is in, moved under `root`; any other path unchanged."""
    for mount in sorted((m.rstrip("/") for m in mounts), key=len, reverse=True):
        if path == mount or path.startswith(mount + "/"):
            return str(Path(root) / path[len(mount):].lstrip("/"))
    return path


def mapped_body(body: bytes, mounts: list[str], root: str) -> bytes:
    """A load request's JSON body with its `lora_path` mapped; a body that is not such JSON unchanged."""
    try:
        data = json.loads(body)
    except ValueError:
        return body
    if not isinstance(data, dict) or not isinstance(data.get("lora_path"), str):
        return body
    return json.dumps({**data, "lora_path": map_path(data["lora_path"], mounts, root)}).encode()


class MountMap:
    """ASGI middleware: maps `lora_path` in adapter load requests, passes everything else through."""

    def __init__(self, app):
        self.app = app
        self.mounts = json.loads(os.environ.get(MOUNTS_ENV, "[]"))
        self.root = os.environ.get(ROOT_ENV, "")

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http" or scope.get("path") not in LOAD_PATHS or not self.mounts:
            await self.app(scope, receive, send)
            return
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = mapped_body(b"".join(chunks), self.mounts, self.root)
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
        scope = {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]}
        sent = False

        async def replay():
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)
