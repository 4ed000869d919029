"""The door's checks of an OpenAI request body, before the request is counted as anything: plain JSON nested at
most MAX_DEPTH levels, a `model` that can be a name (the control plane's own rule), and every field the gateway
itself reads (stream, stream_options, the completion length, n, best_of, the prompt) of a type the engine
accepts, agreeing with each other. A failure is a 400 naming the field and the reason; the rest of the body is
the engine's to judge.

What a request may generate is read as its endpoint's engine reads it (vLLM's ChatCompletionRequest and
CompletionRequest): chat honours `max_completion_tokens`, else `max_tokens`; completions only `max_tokens`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from enginevocab.labels import NAME_MAX, NAME_RE

MAX_DEPTH = 64  # containers inside containers; a chat body with tools and JSON schemas needs about 10
MAX_CHOICES = 128  # n and best_of (OpenAI's own bound on n)
MAX_PROMPTS = 256  # prompts in one completions request
MAX_TOKENS = 10**9  # a completion length past any model's context: a mistake, and too large to count with
TOO_DEEP = f"The body is nested too deeply (at most {MAX_DEPTH} levels of lists and objects)."


class Invalid(ValueError):
    """A body the gateway refuses with 400: the reason, and the field when one is to blame."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.message, self.param = message, param


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI endpoint as its engine reads it: the field holding the prompt, and the completion-length fields
    it honours (the first one set wins)."""

    required: str
    lengths: tuple[str, ...]


ENDPOINTS = {"/v1/chat/completions": Endpoint("messages", ("max_completion_tokens", "max_tokens")),
             "/v1/completions": Endpoint("prompt", ("max_tokens",))}
LENGTH_FIELDS = ("max_completion_tokens", "max_tokens")


@dataclass(frozen=True)
class Demand:
    """What a checked request asks the engine to generate: `completion` tokens at most (None: the engine's
    default) for each of `sequences` sequences (the copies of each prompt times the prompts)."""

    completion: int | None
    sequences: int


def parse(body: bytes) -> dict:
    """The body as a JSON object: plain JSON (no NaN or Infinity), nested at most MAX_DEPTH levels."""
    try:
        request = json.loads(body, parse_constant=_refuse_constant)
    except RecursionError as exc:  # past the parser's own limit (about 1,000 levels)
        raise Invalid(TOO_DEEP) from exc
    except ValueError as exc:
        raise Invalid("The body is not valid JSON.") from exc
    if not isinstance(request, dict):
        raise Invalid("The body must be a JSON object.")
    if too_deep(request, MAX_DEPTH):
        raise Invalid(TOO_DEEP)
    return request


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def too_deep(value, limit: int) -> bool:
    """Whether lists and objects nest more than `limit` levels in `value`; walked with a stack, not recursion."""
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if level > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return False


def checked_model(request: dict, endpoint: Endpoint) -> str:
    """The request's `model`, once the required fields are present and it is a name the control plane could
    have given (so it can be looked up, logged and metered as it is)."""
    for name in ("model", endpoint.required):
        if name not in request:
            raise Invalid(f"'{name}' is a required property.", name)
    model = request["model"]
    if not isinstance(model, str) or len(model) > NAME_MAX or not NAME_RE.match(model):
        raise Invalid(f"'model' must be a model's name: at most {NAME_MAX} lower-case letters, digits and '-', "
                      "starting and ending with a letter or digit.", "model")
    return model


def checked_demand(request: dict, endpoint: Endpoint) -> Demand:
    """The fields the gateway reads, checked; what the request may make the engine generate."""
    if request.get("stream") is not None and not isinstance(request["stream"], bool):
        raise Invalid("'stream' must be true or false.", "stream")
    options = request.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise Invalid("'stream_options' must be an object.", "stream_options")
    if options and options.get("include_usage") is not None and not isinstance(options["include_usage"], bool):
        raise Invalid("'stream_options.include_usage' must be true or false.", "stream_options")
    lengths = {name: _integer(request, name, 0, MAX_TOKENS) for name in LENGTH_FIELDS}
    ignored = [name for name in LENGTH_FIELDS if name not in endpoint.lengths and lengths[name] is not None]
    if ignored:
        raise Invalid(f"'{ignored[0]}' is not read on this endpoint: set '{endpoint.lengths[0]}'.", ignored[0])
    honoured = [lengths[name] for name in endpoint.lengths if lengths[name] is not None]
    if len(set(honoured)) > 1:
        raise Invalid(f"{' and '.join(repr(n) for n in endpoint.lengths)} disagree: set one of them.",
                      endpoint.lengths[0])
    n = _integer(request, "n", 1, MAX_CHOICES) or 1
    best_of = _integer(request, "best_of", 1, MAX_CHOICES)
    if best_of is not None and best_of < n:
        raise Invalid(f"'best_of' ({best_of}) must be at least 'n' ({n}).", "best_of")
    prompts = _prompts(request) if endpoint.required == "prompt" else _messages(request)
    return Demand(honoured[0] if honoured else None, max(n, best_of or n) * prompts)


def _integer(request: dict, name: str, least: int, most: int) -> int | None:
    value = request.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= most:
        raise Invalid(f"'{name}' must be an integer from {least} to {most}.", name)
    return value


def _prompts(request: dict) -> int:
    """How many prompts a completions request holds: a string or a list of token ids is one."""
    prompt = request["prompt"]
    if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and all(map(_token_id, prompt))):
        return 1
    if not isinstance(prompt, list) or not prompt or not (
            all(isinstance(p, str) for p in prompt)
            or all(isinstance(p, list) and p and all(map(_token_id, p)) for p in prompt)):
        raise Invalid("'prompt' must be a string, a list of token ids, a list of strings or a list of token-id "
                      "lists, none of them empty.", "prompt")
    if len(prompt) > MAX_PROMPTS:
        raise Invalid(f"'prompt' holds {len(prompt)} prompts; at most {MAX_PROMPTS} go in one request.", "prompt")
    return len(prompt)


def _token_id(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _messages(request: dict) -> int:
    if not isinstance(request["messages"], list):
        raise Invalid("'messages' must be a list.", "messages")
    return 1
