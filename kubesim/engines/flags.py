"""Command lines of the real engines: vLLM 0.32 (`vllm serve`) and SGLang 0.5 (`sglang.launch_server`).

Parsed with argparse over the engines' own flag names, so a flag the engine lacks or a value of the wrong
type fails with argparse's wording ("error: unrecognized arguments: --foo") and the container exits.
The parser of an engine version has the flags the vocabulary gives that version (`enginevocab.versions`),
so the simulated engine of an image tag refuses a flag its version does not have, as its argparse would.
Only flags the simulation uses are typed; the rest of vLLM's own options (`enginevocab/vllm_parser.json`) are
accepted as its parser accepts them, abbreviations included, and ignored.
"""

from __future__ import annotations

import argparse
import re
import shlex

from enginevocab import sglang, versions, vllm, vllm_classes
from enginevocab.values import ANY, APPEND, APPEND_LIST, FLOATS, LIST, SWITCH
from enginevocab.versions import EVERY_VERSION
from kubesim.workload import WorkloadExit


class EngineArgError(Exception):
    """A command line the engine rejects; `usage` and `message` are what the engine prints."""

    def __init__(self, prog: str, usage: str, message: str):
        super().__init__(f"{prog}: error: {message}")
        self.lines = [usage.rstrip(), f"{prog}: error: {message}"]


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse would print and sys.exit(2)
        raise EngineArgError(self.prog, self.format_usage(), message)


# The engines' flag tables live in the shared vocabulary, so what the renderer writes is what is parsed here.
VLLM_FLAGS, VLLM_BOOLS, VLLM_SHORT_BOOLS = vllm.FLAGS, vllm.BOOLS, vllm.SHORT_BOOLS
SGLANG_FLAGS, SGLANG_SWITCHES = sglang.FLAGS, sglang.SWITCHES

def table_parser(prog: str, table, *, allow_abbrev: bool = True) -> _Parser:
    """A parser of every (flags, kind, default) row of a vocabulary table (the routers' command lines)."""
    p = _Parser(prog=prog, allow_abbrev=allow_abbrev, add_help=False)
    for flags, kind, default in table:
        _add(p, flags, kind, default)
    return p


def _add(parser: argparse.ArgumentParser, flags, kind, default) -> None:
    if kind == SWITCH:
        parser.add_argument(*flags, action="store_true", default=default)
    elif kind == LIST:
        parser.add_argument(*flags, nargs="+", default=default)
    elif kind == ANY:
        parser.add_argument(*flags, nargs="*", default=default)
    elif kind == APPEND_LIST:
        parser.add_argument(*flags, nargs="+", action="append", default=default)
    elif kind == FLOATS:
        parser.add_argument(*flags, nargs="+", type=float, default=default)
    elif kind == APPEND:
        parser.add_argument(*flags, action="append", default=default)
    elif isinstance(kind, tuple):  # choices of one type (vLLM's --max-lora-rank converts to int first)
        parser.add_argument(*flags, choices=kind, type=type(kind[0]), default=default)
    else:
        parser.add_argument(*flags, type=kind, default=default)


def _has(spans, flag: str, version: str | None) -> bool:
    return version is None or spans.get(flag, EVERY_VERSION).has(version)


def vllm_parser(prog: str, positional_model: bool, version: str | None = None) -> _Parser:
    """`vllm serve`'s parser; with `version`, only the flags that version has."""
    p = _Parser(prog=prog, allow_abbrev=vllm_classes.PARSER["allow_abbrev"], add_help=False)
    if positional_model:
        p.add_argument("model_tag", nargs="?")
    for flags, kind, default in VLLM_FLAGS:
        if _has(vllm.SPANS, flags[0], version):
            _add(p, flags, kind, default)
        else:
            p.set_defaults(**{flags[0][2:].replace("-", "_"): default})  # the simulation still reads it
    for name, default in VLLM_BOOLS:
        names = [f"--{name}"] + ([VLLM_SHORT_BOOLS[name]] if name in VLLM_SHORT_BOOLS else [])
        if _has(vllm.SPANS, f"--{name}", version):
            action = "store_true" if name in vllm.STORE_TRUE else argparse.BooleanOptionalAction
            p.add_argument(*names, action=action, default=default)
        else:
            p.set_defaults(**{name.replace("-", "_"): default})
    _add_untyped(p, version)
    return p


def _add_untyped(p: argparse.ArgumentParser, version: str | None) -> None:
    """The rest of vLLM's own options (vllm_parser.json): accepted as its parser accepts them, not simulated."""
    for option in vllm_classes.PARSER["options"]:
        flags = [f for f in option["flags"] if not f.startswith("--no-")]
        if any(f in p._option_string_actions for f in flags) or not _has(vllm.SPANS, flags[0], version):
            continue
        if option["action"] == "BooleanOptionalAction":
            p.add_argument(*flags, action=argparse.BooleanOptionalAction)
        elif option["action"] == "_StoreTrueAction":
            p.add_argument(*flags, action="store_true")
        else:
            p.add_argument(*flags, nargs=option["nargs"] if option["nargs"] in ("+", "?", "*") else None)


def sglang_parser(prog: str, version: str | None = None) -> _Parser:
    """`sglang.launch_server`'s parser; with `version`, only the flags that version has."""
    p = _Parser(prog=prog, add_help=False)
    for flags, kind, default in SGLANG_FLAGS:
        if _has(sglang.SPANS, flags[0], version):
            _add(p, flags, kind, default)
        else:
            p.set_defaults(**{flags[0][2:].replace("-", "_"): default})
    for name in SGLANG_SWITCHES:
        if _has(sglang.SPANS, f"--{name}", version):
            p.add_argument(f"--{name}", action="store_true")
        else:
            p.set_defaults(**{name.replace("-", "_"): False})
    return p


def image_version(image: str) -> str | None:
    """The version an image reference's tag names ("lmsysorg/sglang:v0.5.2-cu126" -> "0.5.2"), else None."""
    name = image.split("@", 1)[0]
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else ""
    return versions.named(tag, None)


_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def expand(words: list[str], env: dict[str, str]) -> list[str]:
    """Kubernetes' $(VAR) expansion in command and args."""
    return [_VAR.sub(lambda m: env.get(m.group(1), m.group(0)), w) for w in words]


def command_line(container: dict, env: dict[str, str]) -> list[str]:
    """The container's argv (command + args), unwrapping `sh -c "..."` scripts."""
    argv = expand(list(container.get("command") or []) + list(container.get("args") or []), env)
    if len(argv) >= 3 and argv[0].rsplit("/", 1)[-1] in ("sh", "bash") and argv[1] in ("-c", "-lc", "-ec"):
        script = argv[2]
        for part in re.split(r"&&|;|\|\|", script):
            words = shlex.split(part)
            if words and words[0] == "exec":
                words = words[1:]
            if any(w in ("serve", "-m") or "launch_server" in w or "launch_router" in w for w in words):
                return words
        return shlex.split(script)
    return argv


def normalise_vllm_underscores(argv: list[str]) -> list[str]:
    """vLLM accepts `--max_num_seqs` for `--max-num-seqs`, and `-O3` or `-O 3` for `--optimization-level 3`."""
    out = []
    for n, a in enumerate(argv):
        level = vllm.optimization_level(a, argv[n + 1] if n + 1 < len(argv) else None)
        if level is not None:
            out += ["--optimization-level", level] if level else ["--optimization-level"]
            continue
        if a.startswith("--"):
            key, sep, val = a.partition("=")
            a = key.replace("_", "-") + sep + val
        out.append(a)
    return out


def parse_vllm(argv: list[str], version: str | None = None) -> tuple[argparse.Namespace, str]:
    """(namespace, prog) for a vLLM container argv; argv empty means the image entrypoint with no args.

    `version` is the engine's (from the image tag): a flag it does not have is refused.
    """
    rest = list(argv)
    positional = True
    prog = "vllm serve"
    if rest and rest[0].rsplit("/", 1)[-1] == "vllm":
        rest = rest[1:]
        if not rest or rest[0] != "serve":
            raise WorkloadExit(
                "vllm: error: argument subparser: invalid choice: "
                f"{(rest or [''])[0]!r} (choose from 'chat', 'complete', 'serve', 'bench', 'collect-env', "
                "'run-batch')",
                exit_code=2,
            )
        rest = rest[1:]
    elif rest and rest[0].rsplit("/", 1)[-1].startswith("python"):
        if len(rest) < 3 or rest[1] != "-m":
            raise WorkloadExit(f"{rest[0]}: can't open file: not a vLLM entrypoint", exit_code=2)
        module = rest[2]
        if module != "vllm.entrypoints.openai.api_server":
            raise WorkloadExit(f"/usr/bin/python3: No module named {module}", exit_code=1)
        rest = rest[3:]
        positional = False
        prog = "api_server.py"
    try:
        ns = vllm_parser(prog, positional, version).parse_args(normalise_vllm_underscores(rest))
    except EngineArgError as e:
        raise WorkloadExit(e.lines[-1], exit_code=2, logs=e.lines) from None
    model = getattr(ns, "model_tag", None) or ns.model
    if getattr(ns, "model_tag", None) and ns.model and ns.model_tag != ns.model:
        raise WorkloadExit(
            f"ValueError: With `vllm serve`, you should provide the model as a positional argument or in a "
            f"config file instead of via the `--model` option. The `--model` option will be removed in a "
            f"future version. (positional {ns.model_tag!r}, --model {ns.model!r})"
        )
    ns.model = model or "Qwen/Qwen3-0.6B"  # vLLM's default model when none is given
    return ns, prog


def parse_sglang(argv: list[str], version: str | None = None) -> tuple[argparse.Namespace, str]:
    """(namespace, prog) for an SGLang container argv; a flag `version` does not have is refused."""
    rest = list(argv)
    prog = "launch_server.py"
    if rest and rest[0].rsplit("/", 1)[-1] == "sglang":
        if len(rest) < 2 or rest[1] != "serve":
            raise WorkloadExit(
                f"sglang: error: invalid choice: {(rest[1:] or [''])[0]!r} (choose from 'serve')", exit_code=2
            )
        rest = rest[2:]
        prog = "sglang serve"
    elif rest and rest[0].rsplit("/", 1)[-1].startswith("python"):
        if len(rest) < 3 or rest[1] != "-m":
            raise WorkloadExit(f"{rest[0]}: not an SGLang entrypoint", exit_code=2)
        if rest[2] not in ("sglang.launch_server", "sglang.cli.serve"):
            raise WorkloadExit(f"/usr/bin/python3: No module named {rest[2]}", exit_code=1)
        rest = rest[3:]
    try:
        ns = sglang_parser(prog, version).parse_args(rest)
    except EngineArgError as e:
        raise WorkloadExit(e.lines[-1], exit_code=2, logs=e.lines) from None
    if not ns.model_path:
        lines = [
            sglang_parser(prog, version).format_usage().rstrip(),
            f"{prog}: error: the following arguments are required: --model-path/--model",
        ]
        raise WorkloadExit(lines[-1], exit_code=2, logs=lines)
    return ns, prog
