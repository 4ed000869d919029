"""Value types of engine flags, as the engines' argument parsers convert them."""

from __future__ import annotations

import argparse
import json
import re

STR, INT, FLOAT = str, int, float
# Flag kinds that are not a converter: "list" and "floats" take one or more values, "any" zero or more;
# "append" one value per occurrence of the flag, collected, "append_list" one or more per occurrence; "switch"
# is a flag without a value and without a --no- form.
LIST, FLOATS, ANY, APPEND, APPEND_LIST, SWITCH = "list", "floats", "any", "append", "append_list", "switch"


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


def human_readable_int(value: str) -> int:
    """vLLM's human_readable_int: 25.6k = 25,600 (k, m, g, t decimal), 1K = 1,024 (K, M, G, T binary, whole
    numbers only), else a plain int."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value.strip())
    if not m:
        return int(value)
    number, suffix = m.groups()
    if suffix.islower():
        return int(float(number) * 1000 ** ("kmgt".index(suffix) + 1))
    if "." in number:
        raise argparse.ArgumentTypeError(
            f"Decimals are not allowed with binary suffixes like {suffix}. Did you mean to use "
            f"{number}{suffix.lower()} instead?")
    return int(number) * 1024 ** ("KMGT".index(suffix) + 1)


def json_or_str(value: str):
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"invalid JSON: {value!r} ({e.msg})") from None


