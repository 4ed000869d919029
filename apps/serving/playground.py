"""Sending one prompt to a service through the inference gateway, streamed back with timings.

The playground is a client of the gateway like any tenant application: the prompt goes to `GATEWAY_URL`
with the inference key the user gives, so it is authenticated, limited and metered as the application's
requests would be, and the gateway picks the pod. Nothing here holds cluster credentials or goes through
the Kubernetes API server. The key is passed on, never stored or logged.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Iterator
from dataclasses import dataclass

import urllib3
from django.conf import settings

from apps.serving.choices import Phase

KINDS = ("chat", "completion")
MAX_TOKENS_LIMIT = 2048
TIMEOUT = (5, 120)  # seconds to connect, seconds between bytes
HTTP = urllib3.PoolManager(maxsize=8)  # keeps connections to the gateway between prompts


class PlaygroundError(Exception):
    """The prompt cannot be sent (service not Ready, no ready pod, bad input); `field` names the form field at
    fault, when one is."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


KEY_FIELD = "inference_key"


def check_key(key: str) -> str:
    """The inference key as it will be sent in the Authorization header, or PlaygroundError at its field: keys
    are printable ASCII, and a line break or a character outside Latin-1 cannot be sent in a header at all."""
    key = key.strip()
    if not key:
        raise PlaygroundError("Give an inference key of this tenant: the playground calls the gateway as your "
                              "application would.", KEY_FIELD)
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in key):
        raise PlaygroundError("The inference key holds a line break or another control character; paste the key "
                              "alone, on one line.", KEY_FIELD)
    if not key.isascii():
        raise PlaygroundError("The inference key holds characters outside ASCII; inference keys are letters, "
                              "digits, '-' and '_' (copy it again from the Inference keys page).", KEY_FIELD)
    return key


@dataclass(frozen=True)
class Prompt:
    """What the user asks: a chat message or a completion prompt, and how many tokens at most."""

    kind: str
    text: str
    max_tokens: int = 128
    temperature: float = 0.7

    def validate(self) -> None:
        if self.kind not in KINDS:
            raise PlaygroundError(f"kind must be one of {', '.join(KINDS)}.")
        if not self.text.strip():
            raise PlaygroundError("Write a prompt first.")
        if not 1 <= self.max_tokens <= MAX_TOKENS_LIMIT:
            raise PlaygroundError(f"max tokens must be between 1 and {MAX_TOKENS_LIMIT}.")
        if not 0 <= self.temperature <= 2:
            raise PlaygroundError("temperature must be between 0 and 2.")

    def path(self) -> str:
        return "/v1/chat/completions" if self.kind == "chat" else "/v1/completions"

    def body(self, model: str, stream: bool = True) -> dict:
        body: dict = {"model": model, "max_tokens": self.max_tokens, "temperature": self.temperature}
        if self.kind == "chat":
            body["messages"] = [{"role": "user", "content": self.text}]
        else:
            body["prompt"] = self.text
        if stream:
            body |= {"stream": True, "stream_options": {"include_usage": True}}
        return body


def stream_prompt(service, prompt: Prompt, key: str) -> Iterator[dict]:
    """Send `prompt` to a Ready service through the gateway with inference key `key`, and yield events:
    {"event": "start", "via"}, then {"event": "text", "text"} per piece, then {"event": "done", "ttft_s",
    "tokens", "tokens_per_s"}, or {"event": "error", "message"} (after which nothing follows)."""
    prompt.validate()
    key = check_key(key)
    if service.phase != Phase.READY:
        raise PlaygroundError(f"The service is {service.phase}; the playground needs it Ready.")
    url = settings.GATEWAY_URL + prompt.path()
    started = time.monotonic()
    try:
        response = HTTP.request("POST", url, body=json.dumps(prompt.body(service.name)).encode(),
                                headers={"Content-Type": "application/json", "Accept": "text/event-stream",
                                         "Authorization": f"Bearer {key}"},
                                preload_content=False, retries=False, timeout=urllib3.Timeout(*TIMEOUT))
    except urllib3.exceptions.HTTPError as exc:
        yield {"event": "error", "message": f"The inference gateway at {settings.GATEWAY_URL} did not answer: "
                                            f"{type(exc).__name__}."}
        return
    try:
        yield {"event": "start", "via": "the inference gateway"}
        if response.status >= 400:
            yield {"event": "error", "message": f"HTTP {response.status}: {_error_message(response.read())}"}
            return
        yield from _relay(response, started)
    finally:
        response.release_conn()


def _error_message(body: bytes) -> str:
    """The message of an OpenAI-shaped error ({"error": {"message": ...}}), else the body's start."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    return body.decode(errors="replace")[:500]


def _relay(response, started: float) -> Iterator[dict]:
    """Server-sent events of an OpenAI-compatible stream → text events, then the timings."""
    first = last = None
    pieces = 0
    usage_tokens = None
    buffer = b""
    for chunk in response.stream(1024, decode_content=True):
        buffer += chunk
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            for line in event.splitlines():
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    continue
                payload = json.loads(data)
                if payload.get("usage"):
                    usage_tokens = payload["usage"].get("completion_tokens")
                for choice in payload.get("choices") or []:
                    text = (choice.get("delta") or {}).get("content") or choice.get("text") or ""
                    if text:
                        now = time.monotonic()
                        first = first if first is not None else now
                        last = now
                        pieces += 1
                        yield {"event": "text", "text": text}
    tokens = usage_tokens if usage_tokens is not None else pieces
    decode_s = (last - first) if first is not None and last is not None else 0
    yield {
        "event": "done",
        "ttft_s": round(first - started, 4) if first is not None else None,
        "tokens": tokens,
        # Tokens after the first, over the time they took: the decode rate the user saw.
        "tokens_per_s": round((tokens - 1) / decode_s, 1) if decode_s > 0 and tokens > 1 else None,
    }


def snippets(service, prompt: Prompt) -> dict[str, str]:
    """The same request for the tenant's own code: curl and the OpenAI Python client, through the inference
    gateway (`GATEWAY_PUBLIC_URL`) with an inference key from the environment, the model named as the
    service is (the tenant's application never holds cluster credentials)."""
    body = prompt.body(service.name, stream=True)
    body.pop("stream_options")
    base = settings.GATEWAY_PUBLIC_URL
    curl = (f"curl -N {base}{prompt.path()} \\\n  -H \"Authorization: Bearer $INFERENCE_KEY\" \\\n"
            f"  -H 'Content-Type: application/json' \\\n  -d {shlex.quote(json.dumps(body))}")
    if prompt.kind == "chat":
        call = (f"stream = client.chat.completions.create(\n    model={body['model']!r},\n"
                f"    messages={body['messages']!r},\n    max_tokens={prompt.max_tokens}, "
                f"temperature={prompt.temperature}, stream=True,\n)\n"
                "for chunk in stream:\n    print(chunk.choices[0].delta.content or \"\", end=\"\")")
    else:
        call = (f"stream = client.completions.create(\n    model={body['model']!r},\n    prompt={prompt.text!r},\n"
                f"    max_tokens={prompt.max_tokens}, temperature={prompt.temperature}, stream=True,\n)\n"
                "for chunk in stream:\n    print(chunk.choices[0].text, end=\"\")")
    python = (f"import os\n\nfrom openai import OpenAI\n\n"
              f"client = OpenAI(base_url={base + '/v1'!r}, api_key=os.environ[\"INFERENCE_KEY\"])\n{call}")
    return {"curl": curl, "python": python}
