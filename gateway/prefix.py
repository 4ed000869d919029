"""The prefix blocks of a prompt as the gateway sees it: chained hashes of its text in fixed chunks.

A service's reuse curve ("what would more CPU memory buy?", apps/gateway/kv_reuse.py) needs the prefix
blocks each request looked up, and no engine exports them; the gateway sees every prompt. It cannot run the
model's tokenizer, so it cuts the prompt's text into CHUNK_CHARS-character chunks and hashes each with all
before it (as the engines chain their 16-token blocks): two prompts share their first k chunk hashes exactly
when their first k × CHUNK_CHARS characters are equal. The control plane converts sizes between tokens and
characters with the service's own ratio (prompt tokens the engine reported over characters sent).

Off the request path: the request keeps a `Prompt` (a reference to the parsed body) in its usage row, and the
usage writer's thread hashes it before the row is spooled or copied (`materialize`; about 0.1-0.3 ms a
3,000-token prompt). Bounded in the database: one BLAKE2b of 4 bytes per chunk (about half a byte a prompt
token; among the 100,000 distinct chunks of an hour's sample, 32 bits make about one collision), at most
MAX_BLOCKS chunks kept (a longer prompt's tail is not tracked: about 16,000 tokens).
"""

from __future__ import annotations

import hashlib

CHUNK_CHARS = 64  # about 16 tokens of English text: one engine block
MAX_BLOCKS = 1024


def prompt_text(request: dict, field: str) -> str | None:
    """The prompt's text in the order the engine reads it: each chat message's role and text parts, or the
    completion's prompt; None when it is not text (token ids, a malformed body)."""
    value = request.get(field)
    if field == "prompt":
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        return value if isinstance(value, str) else None
    if not isinstance(value, list):
        return None
    parts = []
    for message in value:
        if not isinstance(message, dict):
            return None
        content = message.get("content")
        if isinstance(content, list):  # content parts: the text ones (an image's bytes are not prompt text)
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        parts.append(f"{message.get('role', '')}\n{content if isinstance(content, str) else ''}\n")
    return "".join(parts)


def prefix_blocks(text: str) -> list[int]:
    """Chained hashes (signed 32-bit, as PostgreSQL's integer) of the text's full chunks, at most MAX_BLOCKS."""
    hashes, previous = [], b""
    for start in range(0, min(len(text) // CHUNK_CHARS, MAX_BLOCKS) * CHUNK_CHARS, CHUNK_CHARS):
        previous = hashlib.blake2b(previous + text[start:start + CHUNK_CHARS].encode(), digest_size=4).digest()
        hashes.append(int.from_bytes(previous, "big", signed=True))
    return hashes


class Prompt:
    """A request's prompt, not hashed yet: what `materialize` turns into a usage row's two columns."""

    __slots__ = ("field", "request")

    def __init__(self, request: dict, field: str):
        self.request, self.field = request, field

    def columns(self) -> tuple[int | None, list[int] | None]:
        """(prompt_chars, prefix_blocks); both None for a prompt that is not text."""
        text = prompt_text(self.request, self.field)
        return (None, None) if text is None else (len(text), prefix_blocks(text))


def materialize(row: tuple, chars_at: int) -> tuple:
    """`row` with a `Prompt` in its prefix-blocks column (just after `chars_at`) hashed into both columns."""
    prompt = row[chars_at + 1]
    if not isinstance(prompt, Prompt):
        return row
    return (*row[:chars_at], *prompt.columns(), *row[chars_at + 2:])
