"""vLLM's own command-line parser, read from the installed vLLM (the `engines` extra; run, never imported).

`python -m enginevocab.vllm_parser_dump` prints every option of the parser `python -m
vllm.entrypoints.openai.api_server` builds, as JSON; with `--check`, it reads a JSON list of argument lists
on stdin and prints, for each, whether that parser accepts it and builds `AsyncEngineArgs` from it. It
imports nothing of the project, whose web app never imports vLLM (DESIGN.md).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys

from enginevocab.vllm_launch import hide_unloadable


def build_parser():
    """The API server's parser, as `vllm.entrypoints.launchers.api_server.entry.main` builds it."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return make_arg_parser(FlexibleArgumentParser(description="vLLM OpenAI-Compatible RESTful API server."))


def _plain(value):
    """A JSON-ready form of a default or a choice (enums, sets and classes become their names)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return getattr(value, "value", None) if hasattr(value, "value") else repr(value)


def _type_name(kind) -> str | None:
    if kind is None:
        return None
    return getattr(kind, "__name__", None) or getattr(getattr(kind, "func", None), "__name__", None) or repr(kind)


def _value_type_name(kind) -> str | None:
    """The converter a value goes through: vLLM's `optional_type(int)` (`_optional_type`, which also takes
    "None") converts with the `int` it wraps, so that is named; any other converter is named as it is."""
    if getattr(kind, "__name__", None) == "_optional_type" and kind.__closure__:
        return _type_name(kind.__closure__[0].cell_contents)
    return _type_name(kind)


def dump(parser) -> dict:
    """{"version", "allow_abbrev", "options": [one object per optional argument]}."""
    import vllm

    options = []
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        options.append({
            "flags": list(action.option_strings),
            "dest": action.dest,
            "action": type(action).__name__,
            "type": _type_name(action.type),
            "value_type": _value_type_name(action.type),
            "choices": _plain(list(action.choices)) if action.choices is not None else None,
            "nargs": action.nargs,
            "default": _plain(action.default),
        })
    return {"version": vllm.__version__, "allow_abbrev": parser.allow_abbrev, "options": options}


def check(parser, argv: list[str]) -> dict:
    """{"ok": bool, "error": the parser's or EngineArgs' message} for one argument list."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(list(argv))
        AsyncEngineArgs.from_cli_args(args)
    except SystemExit:
        # argparse prints its usage (hundreds of lines) before "prog: error: ..."; keep the error only.
        lines = err.getvalue().strip().splitlines()
        first = next((n for n, line in enumerate(lines) if ": error: " in line), max(len(lines) - 1, 0))
        return {"ok": False, "error": [line for line in lines[first:] if "errors.pydantic.dev" not in line]}
    except Exception as refused:  # EngineArgs' own checks raise ValueError, TypeError, ...
        return {"ok": False, "error": [f"{type(refused).__name__}: {refused}"]}
    return {"ok": True, "error": []}


def main() -> None:
    hide_unloadable()
    parser = build_parser()
    if sys.argv[1:] == ["--check"]:
        print(json.dumps([check(parser, argv) for argv in json.load(sys.stdin)]))
    else:
        print(json.dumps(dump(parser), indent=1))


if __name__ == "__main__":
    main()
