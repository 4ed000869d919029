"""Sending one prompt to a service through the Kubernetes API server's proxy, streamed back with timings.

The request takes the same way in as the telemetry scraper: the cluster's API server proxies it, with the
control plane's credentials, so it works from outside the cluster against real clusters and kubesim
alike. A service without a router is asked through the pod proxy of one of its ready engine pods (so the
serving pod is known for certain); a service with a router (P/D, or a routing policy other than round
robin) through the service proxy of its router, which picks the pod (reported as "chosen by the router").
"""

from __future__ import annotations

import json
import random
import shlex
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass

from django.conf import settings

from apps.clusters.incluster import InClusterCredentialsMissing
from apps.clusters.kubeclient import api_client
from apps.serving.choices import DeploymentMode, Phase
from apps.serving.models import ServiceObservation

KINDS = ("chat", "completion")
MAX_TOKENS_LIMIT = 2048
TIMEOUT = (5, 120)  # seconds to connect, seconds between bytes


class PlaygroundError(Exception):
    """The prompt cannot be sent (service not Ready, no ready pod, bad input)."""


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


def _endpoint_parts(service) -> tuple[str, str, int]:
    """(name, namespace, port) of the service's in-cluster endpoint."""
    url = urllib.parse.urlsplit(service.endpoint)
    if not url.hostname or not url.port:
        raise PlaygroundError("The service has no endpoint yet.")
    name, namespace = url.hostname.split(".")[:2]
    return name, namespace, url.port


def proxy_target(service) -> tuple[str, str]:
    """(API path prefix, pod name or "") of the proxy this service's prompts go through."""
    from apps.serving.rendering.routers import needs_router
    from apps.serving.rendering.spec import spec_from_service

    name, namespace, port = _endpoint_parts(service)
    if needs_router(spec_from_service(service)) or service.deployment_mode == DeploymentMode.MULTI_NODE:
        # The router (or the Service in front of LeaderWorkerSet leaders) picks the pod.
        return f"/api/v1/namespaces/{namespace}/services/{name}:{port}/proxy", ""
    observation = ServiceObservation.objects.filter(service=service).first()
    pods = [p for p in (observation.pods if observation else []) if p.get("ready") and p.get("role") == "engine"]
    if not pods:
        raise PlaygroundError("No ready engine pod was observed yet; wait for the service to be Ready.")
    pod = random.choice(pods)["name"]  # spreading prompts over pods, not security
    return f"/api/v1/namespaces/{namespace}/pods/{pod}:{port}/proxy", pod


def stream_prompt(service, prompt: Prompt) -> Iterator[dict]:
    """Send `prompt` to a Ready service and yield events: {"event": "start", "pod", "via"}, then
    {"event": "text", "text"} per piece, then {"event": "done", "ttft_s", "tokens", "tokens_per_s"},
    or {"event": "error", "message"} (after which nothing follows)."""
    prompt.validate()
    if service.phase != Phase.READY:
        raise PlaygroundError(f"The service is {service.phase}; the playground needs it Ready.")
    prefix, pod = proxy_target(service)
    try:
        api = api_client(service.cluster.credentials())
    except InClusterCredentialsMissing as exc:
        raise PlaygroundError(f"The control plane cannot reach the cluster: {exc}") from exc
    try:
        method, url, headers, body, _ = api.param_serialize(
            "POST", prefix + prompt.path(), header_params={"Content-Type": "application/json",
                                                           "Accept": "text/event-stream"},
            body=prompt.body(service.model.name), auth_settings=["BearerToken"])
        started = time.monotonic()
        try:
            response = api.call_api(method, url, header_params=headers, body=body, _request_timeout=TIMEOUT).response
        except Exception as exc:  # the client raises urllib3 and ApiException errors alike
            yield {"event": "error", "message": f"The service did not answer: {exc}"}
            return
        yield {"event": "start", "pod": pod, "via": "pod proxy" if pod else "service proxy (the router picks the pod)"}
        if response.status >= 400:
            detail = response.read().decode(errors="replace")[:500]
            yield {"event": "error", "message": f"HTTP {response.status}: {detail}"}
            return
        yield from _relay(response, started)
    finally:
        api.close()


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
