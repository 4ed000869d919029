"""The engine-argument policy: read extra arguments as the engine's argparse would, then judge each flag.

argparse accepts unique-prefix abbreviations (`--served-model` is `--served-model-name`), aliases
(`-tp`), `--flag=value` and `--flag value`, and positionals; an exact-match check misses all of them,
so each argument is first resolved to its canonical flag, and only then judged by its class: the product's
own (OWNED), a tenant's with the values its bound allows (TENANT), staff's (PLATFORM) or no one's (REFUSED).
A flag in no class is refused to tenants: the list is one of what is allowed, not of what is not.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from enginevocab import sglang, vllm, vllm_classes
from enginevocab.values import FLOATS, LIST
from enginevocab.versions import EVERY_VERSION, Span, named


@dataclass(frozen=True)
class Vocabulary:
    engine: str
    version: str
    names: dict[str, str]  # every spelling -> canonical flag
    kinds: dict[str, object]  # canonical -> converter, choices tuple, LIST/FLOATS, or None (a switch)
    owner: dict[str, str]  # canonical -> the EngineSettings field, or "" for the control plane
    tenant: dict[str, object]  # canonical -> the bound of the values a tenant may give it (enginevocab.bounds)
    platform: dict[str, str]  # canonical -> why only staff may set it
    refused: dict[str, str]  # canonical -> why no one may
    underscores: bool  # vLLM's parser: --max_num_seqs is --max-num-seqs, -O3 --optimization-level 3, --x.key
    spans: dict[str, Span]  # canonical -> the versions that have it (absent: every version)

    def has(self, flag: str, version: str) -> bool:
        """Whether `flag` (canonical) is a flag of this engine's `version`."""
        return self.spans.get(flag, EVERY_VERSION).has(version)

    def at(self, tag: str | None) -> str:
        """The version a runtime's image tag names, or this vocabulary's own when the tag names none."""
        return named(tag, self.version)


def _classes(owned: dict[str, tuple[str, ...]], classes) -> dict:
    """The Vocabulary fields of the four classes: `owned` from the engine's OWNED, the rest from `classes`."""
    owner = {flag: setting for setting, flags in owned.items() for flag in flags}
    return dict(owner=owner, tenant=dict(classes.TENANT), platform=dict(classes.PLATFORM),
                refused=dict(classes.REFUSED))


_PARSER_TYPES = {"int": int, "float": float}


def _parser_kind(option: dict) -> object:
    """The policy's kind of one option of vLLM's own parser (vllm_parser.json)."""
    if option["action"] in ("BooleanOptionalAction", "_StoreTrueAction"):
        return None
    if option["nargs"] == "+":
        return LIST
    if option["choices"] is not None:
        return tuple(str(c) for c in option["choices"] if c is not None)
    return _PARSER_TYPES.get(option["value_type"], str)  # optional_type(int) converts as int


def _vllm() -> Vocabulary:
    """vLLM's vocabulary: every option of its own parser, classified in vllm_classes and vllm.OWNED."""
    names = {flag: canonical for canonical, option in vllm_classes.OPTIONS.items() for flag in option["flags"]}
    kinds = {canonical: _parser_kind(option) for canonical, option in vllm_classes.OPTIONS.items()}
    return Vocabulary("vllm", vllm.VERSION, names, kinds, underscores=True, spans=vllm.SPANS,
                      **_classes(vllm.OWNED, vllm_classes))


def _sglang() -> Vocabulary:
    names: dict[str, str] = {}
    kinds: dict[str, object] = {}
    for flags, kind, _default in sglang.FLAGS:
        kinds[flags[0]] = kind
        names.update({f: flags[0] for f in flags})
    for name in sglang.SWITCHES:
        kinds[f"--{name}"] = None
        names[f"--{name}"] = f"--{name}"
    return Vocabulary("sglang", sglang.VERSION, names, kinds, underscores=False, spans=sglang.SPANS,
                      **_classes(sglang.OWNED, sglang))


VLLM = _vllm()
SGLANG = _sglang()
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
    typed = spelling
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
        base = spelling.partition(".")[0]
        if vocab.underscores and base != spelling and resolve(vocab, base, version)[0]:
            # vLLM's parser folds --x.key value into --x's JSON; the policy reads only the whole object.
            return None, f"{typed} sets one key of {base}: pass {base} as one JSON object instead"
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


def _judge(vocab: Vocabulary, typed: str, flag: str, values: list[str], staff: bool) -> str | None:
    """Why `flag` (as `typed`, with `values`) is refused by its class, or None."""
    shown = typed if typed == flag else f"{typed} ({flag})"
    if flag in vocab.owner:
        setting = vocab.owner[flag]
        if not setting:
            return f"{shown} is set by the control plane"
        return f"{shown} repeats the {setting} setting; set {setting} instead"
    if flag in vocab.refused:
        return f"{shown} is refused ({vocab.refused[flag]})"
    if staff:
        return None
    if flag in vocab.platform:
        return f"{shown} is platform-only ({vocab.platform[flag]}); ask staff for a Runtime that sets it"
    if flag in vocab.tenant:
        return vocab.tenant[flag].problem(shown, values)
    return f"{shown} is not a flag tenants may set"


def check_args(engine: str, args: list[str] | tuple[str, ...], *, staff: bool = False,
               tag: str | None = None) -> list[str]:
    """Every problem with extra engine arguments, in order; empty when the engine and policy accept them.

    `staff` is True for a Runtime's default args, where platform-only flags are allowed and values need only
    be the engine's type; `tag` is the runtime's image tag, whose version decides which flags exist.
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
        level = vllm.optimization_level(token, args[i] if i < len(args) else None) if engine == "vllm" else None
        if level is not None:
            typed, eq, value, flag = token, "=" if level else "", level, "--optimization-level"
        else:
            typed, eq, value = token.partition("=")
            flag, why = resolve(vocab, typed, version)
            if flag is None:
                problems.append(why)
                continue
        kind = vocab.kinds[flag]
        values = [value] if eq else []
        if kind is None:
            if eq:
                problems.append(f"{typed} takes no value")
        elif not eq:
            if i >= len(args) or not is_value(args[i]):
                problems.append(f"{typed} expects a value")
            else:
                values.append(args[i])
                i += 1
                while kind in (LIST, FLOATS) and i < len(args) and is_value(args[i]):
                    values.append(args[i])
                    i += 1
        if kind not in (None, LIST, FLOATS) and values:
            problems.append(_bad_value(kind, typed, values[0]) or "")
        problems.append(_judge(vocab, typed, flag, values, staff) or "")
    return list(dict.fromkeys(p for p in problems if p))
