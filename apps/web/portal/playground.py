"""The playground on a Ready service's page: the prompt form, and a streaming endpoint that relays
`apps.serving.playground.stream_prompt` to the browser as newline-delimited JSON events."""

from __future__ import annotations

import json

from django.http import JsonResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods

from apps.serving.playground import PlaygroundError, Prompt, snippets, stream_prompt
from apps.web.portal.scope import READ, WRITE, tenant_page
from apps.web.portal.services import get_service


def _prompt(data) -> Prompt:
    try:
        return Prompt(kind=data.get("kind", "chat"), text=data.get("prompt", ""),
                      max_tokens=int(data.get("max_tokens") or 128), temperature=float(data.get("temperature") or 0.7))
    except ValueError as exc:
        raise PlaygroundError("max tokens and temperature must be numbers.") from exc


@tenant_page(READ)
@require_http_methods(["GET", "POST"])
def playground(request, tenant, name: str):
    """htmx: the curl and OpenAI-client snippets for the prompt in the form; with `section`, the whole
    playground section (polled while the service is not Ready yet)."""
    service = get_service(tenant, name)
    if request.GET.get("section"):
        return render(request, "portal/partials/playground.html", {"service": service})
    try:
        prompt = _prompt(request.POST or request.GET)
        if not prompt.text.strip():
            prompt = Prompt(kind=prompt.kind, text="Hello!", max_tokens=prompt.max_tokens,
                            temperature=prompt.temperature)
        prompt.validate()
    except PlaygroundError as exc:
        return render(request, "portal/partials/snippets.html", {"error": str(exc)}, status=422)
    return render(request, "portal/partials/snippets.html", {"snippets": snippets(service, prompt)})


@tenant_page(WRITE)
@require_http_methods(["POST"])
def stream(request, tenant, name: str):
    """Send the prompt and stream the answer; costs GPU time, so it is a write (operators and owners)."""
    service = get_service(tenant, name)
    try:
        prompt = _prompt(request.POST)
        events = stream_prompt(service, prompt, request.POST.get("inference_key", ""))
        first = next(events)  # errors before anything was sent surface as a 422 with the reason
    except PlaygroundError as exc:
        # `field`: the form field the message belongs beside (the page shows it there).
        return JsonResponse({"event": "error", "message": str(exc), "field": exc.field}, status=422)

    def lines():
        yield json.dumps(first) + "\n"
        for event in events:
            yield json.dumps(event) + "\n"

    response = StreamingHttpResponse(lines(), content_type="application/x-ndjson")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # proxies in front must not hold the stream back
    return response
