"""OpenAI request bodies as the engines validate them: model name, prompt or messages, max_tokens and the
context limit, with each engine's error wording."""

from __future__ import annotations

from kubesim.engines.config import EngineSpec
from kubesim.engines.tokenizer import chat_prompt, tokenize


class ApiError(Exception):
    """A request the engine refuses: HTTP status, message, OpenAI error type and parameter."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError", param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param


def parse_openai(body: dict, chat: bool, spec: EngineSpec, loras: dict[str, str]) -> tuple[list[int], int, bool]:
    """(prompt tokens, max_tokens, ignore_eos) from an OpenAI request, with the engines' validation."""
    model = body.get("model")
    if model is not None and model not in spec.served_names and model not in loras:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "messages: Field required" if messages is None else "messages must be a list")
        tokens = tokenize(chat_prompt(messages))
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            tokens = list(prompt)
        elif isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            tokens = tokenize(prompt[0])
        elif isinstance(prompt, str):
            tokens = tokenize(prompt)
        else:
            raise ApiError(400, "prompt: Field required" if prompt is None else "Only one prompt is supported")
    if not tokens:
        raise ApiError(400, "The prompt cannot be empty.")
    if body.get("n", 1) != 1:
        raise ApiError(400, "Only n=1 is supported by this simulated engine.", param="n")
    limit = spec.core.max_model_len
    raw = body.get("max_completion_tokens") if chat else None
    raw = raw if raw is not None else body.get("max_tokens")
    if raw is None and spec.kind == "sglang":
        raw = body.get("max_new_tokens")
    if raw is None:
        max_tokens = limit - len(tokens) if chat else 16
    elif not isinstance(raw, int) or raw < 1:
        raise ApiError(400, f"max_tokens must be at least 1, got {raw}.", param="max_tokens")
    else:
        max_tokens = raw
    if max_tokens > limit and spec.kind == "vllm":  # vLLM 0.32 checks this first (renderers/params.py)
        raise ApiError(400, f"max_tokens={max_tokens} cannot be greater than max_model_len={limit}. Please request "
                            f"fewer output tokens. (parameter=max_tokens, value={max_tokens})", param="max_tokens")
    if len(tokens) + max_tokens > limit:
        if spec.kind == "vllm":
            raise ApiError(
                400,
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{len(tokens) + max_tokens} tokens ({len(tokens)} in the messages, {max_tokens} in the "
                "completion). Please reduce the length of the messages or completion.",
                param="max_tokens",
            )
        raise ApiError(
            400,
            f"Requested token count exceeds the model's maximum context length of {limit} tokens. "
            f"You requested a total of {len(tokens) + max_tokens} tokens: {len(tokens)} tokens from the "
            f"input messages and {max_tokens} tokens for the completion. Please reduce the number of "
            "tokens in the input messages or the completion to fit within the limit.",
        )
    if max_tokens < 1:
        raise ApiError(400, f"The prompt ({len(tokens)} tokens) leaves no room for a completion.")
    return tokens, max_tokens, bool(body.get("ignore_eos", False))
