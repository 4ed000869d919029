"""The prefix blocks of a prompt as the gateway sees it: chained hashes of its text in fixed chunks.

A service's reuse curve ("what would more CPU memory buy?", apps/gateway/kv_reuse.py) needs the prefix
blocks each request looked up, and no engine exports them; the gateway sees every prompt. It cannot run the
model's tokenizer, so it cuts the prompt's text into CHUNK_CHARS-character chunks and hashes each with all
before it (as the engines chain their 16-token blocks): two prompts share their first k chunk hashes exactly
when their first k × CHUNK_CHARS characters are equal. The control plane converts sizes between tokens and
characters with the service's own ratio (prompt tokens the engine reported over characters sent).

Off the request path: the request keeps a `Prompt` (a reference to the parsed body) in its usage row, and the
usage writer's thread hashes it before the row is spooled or copied (`materialize`; about 0.1-0.3 ms a
3,000-token prompt). A row whose prompt cannot be hashed (a lone surrogate in its text) keeps its counts without
the two columns. Bounded in the database: one BLAKE2b of 4 bytes per chunk (about half a byte a prompt token;
among the 100,000 distinct chunks of an hour's sample, 32 bits make about one collision), at most MAX_BLOCKS
chunks kept (a longer prompt's tail is not tracked: about 16,000 tokens).

The BLAKE2b is keyed (`hash_key`, from a secret every replica shares), so that someone who reads the database
cannot confirm a guessed prompt by hashing it; replicas with the same secret hash alike, and the control plane
only compares hashes.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Mapping

log = logging.getLogger("gateway.prefix")
CHUNK_CHARS = 64  # about 16 tokens of English text: one engine block
MAX_BLOCKS = 1024
# Where the hash key comes from: the gateway's own secret, else the control plane's SECRET_KEY (each also as
# NAME_FILE, a mounted secret), turned into a key of its own so the hashes reveal nothing of SECRET_KEY.
KEY_SECRETS = ("GATEWAY_PREFIX_HASH_KEY", "SECRET_KEY")
KEY_CONTEXT = b"gw-prefix-hash"  # BLAKE2b's personalisation (at most 16 bytes)


def hash_key(environ: Mapping[str, str] = os.environ) -> bytes | None:
    """The prefix hashes' key, derived from the first secret of KEY_SECRETS set (or its NAME_FILE); None when
    none is. ValueError naming the file when a NAME_FILE cannot be read."""
    for name in KEY_SECRETS:
        secret = environ.get(name, "")
        path = environ.get(f"{name}_FILE", "")
        if not secret and path:
            try:
                with open(path) as handle:
                    secret = handle.read().strip()
            except OSError as exc:
                raise ValueError(f"{name}_FILE={path}: {exc.strerror}") from exc
            if not secret:
                raise ValueError(f"{name}_FILE={path} is empty")
        if secret:
            return hashlib.blake2b(secret.encode(), digest_size=32, person=KEY_CONTEXT).digest()
    return None


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
            content = "".join(text_of(part) for part in content)
        role = message.get("role")
        parts.append(f"{role if isinstance(role, str) else ''}\n{content if isinstance(content, str) else ''}\n")
    return "".join(parts)


def text_of(part) -> str:
    """A content part's text: a text part's string, else nothing (an image, or a `text` that is not a string)."""
    if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
        return part["text"]
    return ""


def prefix_blocks(text: str, key: bytes) -> list[int]:
    """Chained hashes (signed 32-bit, as PostgreSQL's integer) of the text's full chunks keyed with `key`, at most
    MAX_BLOCKS. UnicodeEncodeError for a text that is not valid Unicode (a lone surrogate)."""
    hashes, previous = [], b""
    for start in range(0, min(len(text) // CHUNK_CHARS, MAX_BLOCKS) * CHUNK_CHARS, CHUNK_CHARS):
        previous = hashlib.blake2b(previous + text[start:start + CHUNK_CHARS].encode(), digest_size=4,
                                   key=key).digest()
        hashes.append(int.from_bytes(previous, "big", signed=True))
    return hashes


class Prompt:
    """A request's prompt, not hashed yet: what `materialize` turns into a usage row's two columns."""

    __slots__ = ("field", "request")

    def __init__(self, request: dict, field: str):
        self.request, self.field = request, field

    def columns(self, key: bytes) -> tuple[int | None, list[int] | None]:
        """(prompt_chars, prefix_blocks); both None for a prompt that is not text."""
        text = prompt_text(self.request, self.field)
        return (None, None) if text is None else (len(text), prefix_blocks(text, key))


def materialize(row: tuple, chars_at: int, key: bytes) -> tuple[tuple, bool]:
    """(`row` with a `Prompt` in its prefix-blocks column (just after `chars_at`) hashed into both columns, whether
    its prompt could be); a prompt that cannot be prepared leaves both columns None, never the row lost."""
    prompt = row[chars_at + 1]
    if not isinstance(prompt, Prompt):
        return row, True
    try:
        columns, prepared = prompt.columns(key), True
    except Exception as exc:  # whatever a client sent, the row keeps its counts
        log.warning("a usage row's prompt could not be hashed, kept without it: %s", exc.__class__.__name__)
        columns, prepared = (None, None), False
    return (*row[:chars_at], *columns, *row[chars_at + 2:]), prepared
