"""Value types of engine flags, as the engines' argument parsers convert them."""

from __future__ import annotations

import argparse
import json
import re

STR, INT, FLOAT = str, int, float
# Flag kinds that are not a converter: "list" and "floats" take one or more values.
LIST, FLOATS = "list", "floats"


def model_len(value: str) -> int:
    """vLLM accepts 1k/1K/1m suffixes and -1/auto."""
    v = value.strip().lower()
    if v in ("auto", "-1"):
        return -1
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([km]?)", v)
    if not m:
        raise argparse.ArgumentTypeError(f"invalid max model length: {value!r}")
    mult = {"": 1, "k": 1000, "m": 1000**2}[m.group(2)]
    return int(float(m.group(1)) * mult)


def json_or_str(value: str):
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"invalid JSON: {value!r} ({e.msg})") from None


