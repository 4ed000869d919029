"""A deterministic tokenizer approximation: words of up to six letters, longer words split, punctuation alone.

`count_tokens("Hello, world")` is 3 ("Hello", ",", " world"). Token ids are stable hashes of the pieces,
so equal text prefixes give equal token prefixes and the prefix cache sees them. Generated text is drawn
from a fixed word list so every generated token is one piece.
"""

from __future__ import annotations

import random
import re
import zlib

_PIECE = re.compile(r"\s?[A-Za-z0-9]{1,6}|\s?[^\sA-Za-z0-9]|\s+(?=\s)|\s+$")

WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "on",
    "be",
    "by",
    "at",
    "this",
    "from",
    "or",
    "an",
    "are",
    "not",
    "have",
    "but",
    "one",
    "all",
    "which",
    "were",
    "when",
    "we",
    "there",
    "can",
    "more",
    "if",
    "will",
    "about",
    "so",
    "no",
    "what",
    "up",
    "out",
    "into",
    "some",
    "time",
    "only",
    "new",
    "would",
    "model",
    "token",
    "cache",
    "batch",
    "queue",
    "block",
    "layer",
    "scale",
    "node",
    "pod",
    "gpu",
    "load",
    "rate",
]


_VOCAB: dict[str, int] = {}
_VOCAB_LIMIT = 1_000_000


def _piece_id(piece: str) -> int:
    tid = zlib.crc32(piece.encode())
    if len(_VOCAB) >= _VOCAB_LIMIT:
        _VOCAB.clear()
    _VOCAB[piece] = tid
    return tid


_SPACED = [" " + w for w in WORDS]


def tokenize(text: str) -> list[int]:
    """Token ids of `text` (crc32 of each piece, stable across processes; memoised per piece)."""
    get = _VOCAB.get
    return [get(p) or _piece_id(p) for p in _PIECE.findall(text)]


def count_tokens(text: str) -> int:
    return len(_PIECE.findall(text))


def chat_prompt(messages: list[dict]) -> str:
    """The text a chat template would render: role markers around each message's content."""
    parts = []
    for m in messages:
        content = m.get("content") or ""
        if isinstance(content, list):
            content = " ".join(c.get("text", "") for c in content if isinstance(c, dict))
        parts.append(f"<{m.get('role', 'user')}> {content}\n")
    parts.append("<assistant>")
    return "".join(parts)


def generated_words(seed: int, request_id: str, n: int) -> list[str]:
    """`n` generated pieces, each exactly one token, deterministic for (seed, request id)."""
    r = random.Random(zlib.crc32(f"{seed}:{request_id}".encode()))
    return r.choices(_SPACED, k=n)
