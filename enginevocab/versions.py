"""Which versions of an engine have a flag: each flag's span, and the version an image tag names.

A span runs from `since` (the first version with the flag; None: as far back as the vocabulary knows)
up to, not including, `until` (the first version without it; None: still there). A flag without a
recorded span is one the vocabulary knows in its own version only, and is taken to be in every version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

Version = tuple[int, int, int]
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse(text: str | None) -> Version | None:
    """(0, 5, 2) for "v0.5.2-cu126" or "0.5.2"; None for a tag that names no version ("latest", "nightly")."""
    match = _VERSION.match((text or "").strip())
    return (int(match[1]), int(match[2]), int(match[3] or 0)) if match else None


def named(tag: str | None, default: str | None) -> str | None:
    """The version a runtime's tag names ("v0.5.2-cu126" -> "0.5.2"), or `default` when it names none."""
    version = parse(tag)
    return ".".join(map(str, version)) if version else default


@dataclass(frozen=True)
class Span:
    since: str | None = None
    until: str | None = None

    def has(self, version: str) -> bool:
        v = parse(version)
        if v is None:
            return True
        return (self.since is None or v >= parse(self.since)) and (self.until is None or v < parse(self.until))


EVERY_VERSION = Span()
