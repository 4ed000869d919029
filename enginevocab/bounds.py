"""The values a tenant may give a tenant-settable engine flag: a range, a set of choices, a name, a JSON object.

Each bound answers `problem(flag, values)` with why the values are refused, or None; `values` are the words
after the flag (one, or several for a list flag, none for a switch). JSON-valued flags are parsed, and only
the keys the bound names, each with a value inside its own bound, pass.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

# Sequences one engine replica may run at once (max_num_seqs, --max-num-seqs, --max-running-requests): far
# above any engine's default (256 to 4,096) and small enough that a scheduler sized from it stays sane.
MAX_NUM_SEQS = 16_384
# Tokens one engine step may schedule (max_num_batched_tokens): 64 times vLLM's largest default (16,384).
MAX_NUM_BATCHED_TOKENS = 1_048_576


class Bound:
    """Base: a bound checks the words after a flag, or one value inside a JSON object (`json_problem`)."""

    def problem(self, flag: str, values: list[str]) -> str | None:
        if len(values) != 1:
            return f"{flag} takes one value"
        return self.word_problem(flag, values[0])

    def word_problem(self, flag: str, word: str) -> str | None:
        raise NotImplementedError

    def json_problem(self, name: str, value) -> str | None:
        raise NotImplementedError


@dataclass(frozen=True)
class Switch(Bound):
    """A flag without a value (vLLM's --x / --no-x, SGLang's switches)."""

    def problem(self, flag, values):
        return f"{flag} takes no value" if values else None

    def json_problem(self, name, value):
        return None if isinstance(value, bool) else f"{name} must be true or false"


@dataclass(frozen=True)
class Num(Bound):
    """An integer (`integer`) or a finite number, from `low` to `high` inclusive."""

    low: float
    high: float
    integer: bool = True

    def _range(self, name: str, number) -> str | None:
        if not self.low <= number <= self.high:
            return f"{name} must be between {_shown(self.low)} and {_shown(self.high)}"
        return None

    def word_problem(self, flag, word):
        try:
            number = int(word) if self.integer else float(word)
        except ValueError:
            return f"{flag} must be {'an integer' if self.integer else 'a number'}, not {word!r}"
        if math.isnan(number):
            return f"{flag} must be a number, not {word!r}"
        return self._range(flag, number)

    def json_problem(self, name, value):
        kinds = (int,) if self.integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            return f"{name} must be {'an integer' if self.integer else 'a number'}"
        return self._range(name, value)


@dataclass(frozen=True)
class OneOf(Bound):
    """One of a fixed set of words (for JSON: of strings, or of integers when the choices are)."""

    choices: tuple

    def word_problem(self, flag, word):
        return None if word in map(str, self.choices) else f"{flag} must be one of {', '.join(map(str, self.choices))}"

    def json_problem(self, name, value):
        if isinstance(value, bool) or value not in self.choices:
            return f"{name} must be one of {', '.join(map(str, self.choices))}"
        return None


@dataclass(frozen=True)
class Name(Bound):
    """A registered name (a parser, a backend, a module of the model): no path, no dot-separated import."""

    pattern: str = r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}"

    def word_problem(self, flag, word):
        return None if re.fullmatch(self.pattern, word) else f"{flag} must be a name matching {self.pattern}"

    def json_problem(self, name, value):
        return self.word_problem(name, value) if isinstance(value, str) else f"{name} must be a string"


@dataclass(frozen=True)
class ListOf(Bound):
    """One or more words (or a JSON list), each inside `item`, at most `most` of them."""

    item: Bound
    most: int = 64

    def problem(self, flag, values):
        if not 1 <= len(values) <= self.most:
            return f"{flag} takes 1 to {self.most} values"
        return next((p for p in (self.item.word_problem(flag, v) for v in values) if p), None)

    def json_problem(self, name, value):
        if not isinstance(value, list) or len(value) > self.most:
            return f"{name} must be a list of at most {self.most} items"
        return next((p for p in (self.item.json_problem(name, v) for v in value) if p), None)


@dataclass(frozen=True)
class Json(Bound):
    """A JSON object whose keys are among `keys`, each value inside its bound."""

    keys: dict[str, Bound] = field(default_factory=dict)

    def word_problem(self, flag, word):
        try:
            value = json.loads(word)
        except (ValueError, RecursionError):
            return f"{flag} must be a JSON object"
        return self.json_problem(flag, value)

    def json_problem(self, name, value):
        if not isinstance(value, dict):
            return f"{name} must be a JSON object"
        for key, item in value.items():
            if key not in self.keys:
                allowed = ", ".join(sorted(self.keys)) or "none"
                return f"{name} may not set {key!r} (allowed keys: {allowed})"
            refused = self.keys[key].json_problem(f"{name} {key}", item)
            if refused:
                return refused
        return None


def _shown(number: float) -> str:
    return f"{number:g}" if isinstance(number, float) else str(number)
