"""The engine-argument policy: read extra arguments as the engine's argparse would, then judge each flag.

argparse accepts unique-prefix abbreviations (`--served-model` is `--served-model-name`), aliases
(`-tp`), `--flag=value` and `--flag value`, and positionals; an exact-match check misses all of them,
so each argument is first resolved to its canonical flag, and only then checked against who owns it.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from enginevocab import sglang, vllm
from enginevocab.values import FLOATS, LIST
from enginevocab.versions import EVERY_VERSION, Span, named


@dataclass(frozen=True)
class Vocabulary:
    engine: str
    version: str
    names: dict[str, str]  # every spelling -> canonical flag
    kinds: dict[str, object]  # canonical -> converter, choices tuple, LIST/FLOATS, or None (a switch)
    owner: dict[str, str]  # canonical -> the EngineSettings field, or "" for the control plane
    platform_only: dict[str, str]  # canonical -> why only the platform may set it
    underscores: bool  # vLLM reads --max_num_seqs as --max-num-seqs
    spans: dict[str, Span]  # canonical -> the versions that have it (absent: every version)

    def has(self, flag: str, version: str) -> bool:
        """Whether `flag` (canonical) is a flag of this engine's `version`."""
        return self.spans.get(flag, EVERY_VERSION).has(version)

    def at(self, tag: str | None) -> str:
        """The version a runtime's image tag names, or this vocabulary's own when the tag names none."""
        return named(tag, self.version)


def _build(module, engine: str, switches: list[tuple[str, tuple[str, ...]]], underscores: bool) -> Vocabulary:
    names: dict[str, str] = {}
    kinds: dict[str, object] = {}
    for flags, kind, _default in module.FLAGS:
        kinds[flags[0]] = kind
        names.update({f: flags[0] for f in flags})
    for canonical, spellings in switches:
        kinds[canonical] = None
        names.update({f: canonical for f in spellings})
    owner = {flag: setting for setting, flags in module.OWNED.items() for flag in flags}
    return Vocabulary(engine, module.VERSION, names, kinds, owner, dict(module.PLATFORM_ONLY), underscores,
                      module.SPANS)


VLLM = _build(vllm, "vllm", [
    (f"--{n}", (f"--{n}", f"--no-{n}", *([vllm.SHORT_BOOLS[n]] if n in vllm.SHORT_BOOLS else [])))
    for n, _ in vllm.BOOLS
], underscores=True)
SGLANG = _build(sglang, "sglang", [(f"--{n}", (f"--{n}",)) for n in sglang.SWITCHES], underscores=False)
VOCABULARIES = {"vllm": VLLM, "sglang": SGLANG}


def is_value(token: str) -> bool:
    """Whether an argument is a value (a word, or a negative number), not a flag."""
    if not token.startswith("-") or token == "-":
        return True
    try:
        float(token)
    except ValueError:
        return False
    return True


def resolve(vocab: Vocabulary, spelling: str, version: str | None = None) -> tuple[str | None, str | None]:
    """(canonical flag, None) for a spelling, or (None, why it is not a flag of this engine's `version`).

    `version` defaults to the vocabulary's own; a flag that version lacks is unknown, as to its argparse.
    """
    version = version or vocab.version
    if vocab.underscores and spelling.startswith("--"):
        spelling = "--" + spelling[2:].replace("_", "-")
    if spelling in vocab.names and vocab.has(vocab.names[spelling], version):
        return vocab.names[spelling], None
    if spelling.startswith("--"):
        matches = sorted(n for n in vocab.names if n.startswith(spelling) and vocab.has(vocab.names[n], version))
        if len({vocab.names[m] for m in matches}) == 1:
            return vocab.names[matches[0]], None
        if matches:
            return None, f"{spelling} is ambiguous (could be {', '.join(matches)})"
    return None, f"{spelling} is not a flag of {vocab.engine} {version}"


def _bad_value(kind: object, flag: str, value: str) -> str | None:
    if isinstance(kind, tuple):
        return None if value in kind else f"{flag} must be one of {', '.join(kind)}"
    if callable(kind):
        try:
            kind(value)
        except (ValueError, argparse.ArgumentTypeError):
            return f"{flag} has an invalid value {value!r}"
    return None


def _judge(vocab: Vocabulary, typed: str, flag: str, staff: bool) -> str | None:
    shown = typed if typed == flag else f"{typed} ({flag})"
    if flag in vocab.owner:
        setting = vocab.owner[flag]
        if not setting:
            return f"{shown} is set by the control plane"
        return f"{shown} repeats the {setting} setting; set {setting} instead"
    if flag in vocab.platform_only and not staff:
        return f"{shown} is platform-only ({vocab.platform_only[flag]}); ask staff for a Runtime that sets it"
    return None


def check_args(engine: str, args: list[str] | tuple[str, ...], *, staff: bool = False,
               tag: str | None = None) -> list[str]:
    """Every problem with extra engine arguments, in order; empty when the engine and policy accept them.

    `staff` is True for a Runtime's default args, where platform-only flags are allowed; `tag` is the
    runtime's image tag, whose version decides which flags exist (the vocabulary's own when it names none).
    """
    vocab = VOCABULARIES[engine]
    version = vocab.at(tag)
    problems: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if not token.strip():
            problems.append("empty arguments are not allowed")
            continue
        if is_value(token) or token == "--":
            problems.append(f"{token!r} is a positional argument; the service's model and flags are set "
                            "by the control plane")
            continue
        typed, eq, value = token.partition("=")
        flag, why = resolve(vocab, typed, version)
        if flag is None:
            problems.append(why)
            continue
        kind = vocab.kinds[flag]
        if kind is None:
            if eq:
                problems.append(f"{typed} takes no value")
        elif not eq:
            if i >= len(args) or not is_value(args[i]):
                problems.append(f"{typed} expects a value")
            else:
                value = args[i]
                i += 1
                while kind in (LIST, FLOATS) and i < len(args) and is_value(args[i]):
                    i += 1
        if kind not in (None, LIST, FLOATS) and (eq or value):
            problems.append(_bad_value(kind, typed, value) or "")
        problems.append(_judge(vocab, typed, flag, staff) or "")
    return list(dict.fromkeys(p for p in problems if p))
