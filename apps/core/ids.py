"""Ids and numbers written in URLs and query strings: ASCII digits only.

`int()` and `str.isdigit()` read any Unicode digit ("١" is 1, and "²" passes isdigit), so `?against=١` would
name revision 1 and `1١` object 11. Every place that reads an id from a URL uses this pattern or `ascii_int`.
"""

from __future__ import annotations

import re

ASCII_DIGITS = "[0-9]+"  # `[0-9]` in Python's re is ASCII; `\d` is not
MAX_DIGITS = 18  # every id fits a signed 64-bit column; a longer number names nothing
_ID = re.compile(ASCII_DIGITS)


def ascii_int(value) -> int | None:
    """The whole number `value` writes in ASCII digits (at most MAX_DIGITS of them), else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or len(value) > MAX_DIGITS or not _ID.fullmatch(value):
        return None
    return int(value)
