"""The vocabulary against the pinned vLLM's own parser (the `engines` extra), run in one process per check.

The parser is built as `python -m vllm.entrypoints.openai.api_server` builds it (enginevocab/vllm_parser_dump.py);
every flag it has must be classified once, every flag the vocabulary names must be one of it, and every command
line the product lets through (the demo's rendered lines, each tenant flag at the edges of its bound) must be one
it accepts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from apps.serving.models import InferenceService
from apps.serving.rendering import render_service
from apps.serving.rendering.spec import spec_from_service
from enginevocab import policy, vllm, vllm_classes
from enginevocab.bounds import Json, ListOf, Name, Num, OneOf, Switch
from kubesim.engines.flags import command_line, parse_vllm
from kubesim.workload import WorkloadExit
from tests.serving.test_commands import seed

# One worker runs the whole module under `--dist loadgroup`: its module fixture imports vLLM in a subprocess
# (most of a minute on a busy machine), once per worker that takes one of its tests.
pytestmark = pytest.mark.xdist_group("vllm-parser")

ROOT = Path(__file__).resolve().parents[2]
# What LeaderWorkerSet gives a worker pod, for the $(VAR) references of multi-node arguments.
LWS_ENV = {"LWS_WORKER_INDEX": "1", "LWS_LEADER_ADDRESS": "chat-0.chat", "LWS_GROUP_SIZE": "2"}


def _run(*args: str, stdin: str | None = None):
    done = subprocess.run([sys.executable, "-m", "enginevocab.vllm_parser_dump", *args], input=stdin, cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def parser() -> dict:
    return _run()


def test_the_committed_parser_is_the_pinned_vllms(parser):
    assert parser["version"] == vllm.VERSION
    assert parser == vllm_classes.PARSER


def test_every_flag_of_the_parser_is_classified_once_and_no_other(parser):
    canonical = [option["flags"][0] for option in parser["options"]]
    vocab = policy.VLLM
    classes = [set(vocab.owner), set(vocab.tenant), set(vocab.platform), set(vocab.refused)]
    assert sorted(set(canonical) - set().union(*classes)) == []  # in the parser, in no class
    assert sorted(set().union(*classes) - set(canonical)) == []  # in a class, not in the parser
    assert sum(map(len, classes)) == len(canonical)  # no flag in two classes


def test_every_flag_kubesim_and_the_renderer_know_is_one_of_the_parser(parser):
    spellings = {flag for option in parser["options"] for flag in option["flags"]}
    typed = [flag for flags, _kind, _default in vllm.FLAGS for flag in flags]
    typed += [f"--{name}" for name, _default in vllm.BOOLS] + list(vllm.SHORT_BOOLS.values())
    assert sorted(set(typed) - spellings) == []
    choices = {option["flags"][0]: option["choices"] for option in parser["options"]}
    assert set(vllm.KV_CACHE_DTYPES) <= set(choices["--kv-cache-dtype"])
    assert set(vllm.LORA_RANKS) == set(choices["--max-lora-rank"])


# The parser's converter names (vllm_parser_dump's "value_type") each kind of the vocabulary stands for.
_CONVERTERS = {
    "int": {"int"}, "float": {"float"}, "human_readable_int": {"human_readable_int"},
    # union_dict_and_str takes any string (a dict when it parses as JSON).
    "str": {"str", None, "union_dict_and_str"},
    "model_len": {"human_readable_int_or_auto"},
    "json_or_str": {"parse_dataclass", "loads", "_parse_type"},
}


def _mismatches(option: dict, flags: tuple[str, ...], kind) -> list[str]:
    """How one typed flag of the vocabulary differs from the parser's option: aliases, value type, choices."""
    found = []
    if sorted(flags) != sorted(option["flags"]) or flags[0] != option["flags"][0]:
        found.append(f"spellings {list(flags)} != {option['flags']}")
    if kind in ("list", "append"):
        parser_kind = "list" if option["nargs"] == "+" else "append" if option["action"] == "_AppendAction" else None
        if parser_kind != kind:
            found.append(f"{kind}, the parser {option['action']} nargs={option['nargs']!r}")
    elif isinstance(kind, tuple):
        parser_choices = [str(c) for c in option["choices"] or () if c is not None]
        if sorted(map(str, kind)) != sorted(parser_choices):
            found.append(f"choices {sorted(map(str, kind))} != {sorted(parser_choices)}")
        types = ({type(c).__name__ for c in kind}, {type(c).__name__ for c in option["choices"] or () if c is not None})
        if types[1] and types[0] != types[1]:
            found.append(f"choices of {sorted(types[0])}, the parser's of {sorted(types[1])}")
    else:
        name = getattr(kind, "__name__", str(kind))
        if option["value_type"] not in _CONVERTERS[name]:
            found.append(f"value type {name}, the parser converts with {option['value_type']}")
        if option["choices"] is not None:
            found.append(f"no choices, the parser has {option['choices']}")
    return found


def test_every_typed_flag_has_the_parsers_aliases_value_type_and_choices(parser):
    options = {option["flags"][0]: option for option in parser["options"]}
    found = {flags[0]: _mismatches(options[flags[0]], flags, kind) for flags, kind, _default in vllm.FLAGS}
    assert {flag: problems for flag, problems in found.items() if problems} == {}


def test_the_mismatch_check_sees_a_missing_alias_a_wrong_type_and_wrong_choices(parser):
    """The check above, given entries as they stood before the vocabulary was checked this way, names each
    mismatch."""
    options = {option["flags"][0]: option for option in parser["options"]}
    assert _mismatches(options["--api-server-count"], ("--api-server-count",), int) == [
        "spellings ['--api-server-count'] != ['--api-server-count', '-asc']"]
    assert _mismatches(options["--nnodes"], ("--nnodes", "-n"), str) == [
        "value type str, the parser converts with int"]
    assert _mismatches(options["--data-parallel-backend"], ("--data-parallel-backend", "-dpb"), ("mp", "ray")) == [
        "choices ['mp', 'ray'] != []"]
    assert len(_mismatches(options["--kv-cache-dtype"], ("--kv-cache-dtype",), ("auto", "fp8"))) == 1


def test_every_switch_has_the_parsers_spellings(parser):
    options = {option["flags"][0]: option for option in parser["options"]}
    for name, _default in vllm.BOOLS:
        option = options[f"--{name}"]
        short = [vllm.SHORT_BOOLS[name]] if name in vllm.SHORT_BOOLS else []
        negated = [] if name in vllm.STORE_TRUE else [f"--no-{name}"]
        action = "_StoreTrueAction" if name in vllm.STORE_TRUE else "BooleanOptionalAction"
        assert (name, option["action"], sorted(option["flags"])) == (name, action, sorted([f"--{name}", *short, *negated]))


def _edges(bound) -> list:
    """Values at the edges of a tenant's bound, as JSON values: a range's ends, every choice, a sample name."""
    if isinstance(bound, Num):
        return [bound.low, bound.high] if bound.integer else [float(bound.low), float(bound.high)]
    if isinstance(bound, OneOf):
        return list(bound.choices)
    if isinstance(bound, Name):
        return [next(word for word in ("x1", "assistant", "0.31") if not bound.word_problem("", word))]
    if isinstance(bound, Switch):
        return [True]
    if isinstance(bound, ListOf):
        return [[_edges(bound.item)[0]]]
    return [{key: _edges(item)[0] for key, item in bound.keys.items()}]


def _tenant_lines() -> list[list[str]]:
    """Every tenant-settable flag at the edges of its bound, in every spelling of a switch."""
    spellings = {flag: option["flags"] for flag, option in vllm_classes.OPTIONS.items()}
    lines = []
    for flag, bound in policy.VLLM.tenant.items():
        if isinstance(bound, Switch):
            lines += [[spelling] for spelling in spellings[flag]]
        elif isinstance(bound, Json):
            lines.append([flag, json.dumps(_edges(bound)[0])])
        elif isinstance(bound, ListOf):
            lines.append([flag, *map(str, _edges(bound)[0])])
        else:
            lines += [[flag, str(value)] for value in _edges(bound)]
    assert [line for line in lines if policy.check_args("vllm", line)] == []  # the policy passes them all
    return lines


def _engine_argv(obj) -> list[list[str]]:
    """The argument lists after `vllm serve` of every vLLM container in a rendered object."""
    found = []
    if isinstance(obj, dict):
        for container in obj.get("containers") or ():
            if container.get("image", "").startswith(vllm.IMAGE + ":"):
                env = {**LWS_ENV, **{e["name"]: e.get("value", "") for e in container.get("env") or ()}}
                argv = command_line(container, env)
                found.append(argv[argv.index("serve") + 1:])
        for value in obj.values():
            found += _engine_argv(value)
    elif isinstance(obj, list):
        for value in obj:
            found += _engine_argv(value)
    return found


@pytest.mark.django_db
def test_every_command_line_the_product_lets_through_is_accepted_by_vllms_parser(monkeypatch):
    """The demo's rendered lines and every tenant flag at the edges of its bound, in one process."""
    monkeypatch.setenv("KUBESIM_URL", "http://127.0.0.1:16443")
    seed(password="demo-pass-123")
    demo = []
    for service in InferenceService.objects.filter(runtime__engine="vllm"):
        demo += _engine_argv(render_service(spec_from_service(service)))
    assert len(demo) >= 4  # the demo's standard, P/D, multi-node (leader and worker) and serverless engines
    lines = [*demo, *_tenant_lines()]
    # The last line is one the parser refuses, so a check that accepts everything fails here.
    verdicts = _run("--check", stdin=json.dumps([*lines, ["--disable-log-requests"]]))
    assert [(line, v["error"]) for line, v in zip(lines, verdicts, strict=False) if not v["ok"]] == []
    assert verdicts[-1] == {"ok": False, "error": [
        "vllm_parser_dump.py: error: unrecognized arguments: --disable-log-requests"]}


def test_kubesims_simulated_vllm_parses_every_tenant_line():
    refused = []
    for line in _tenant_lines():
        try:
            parse_vllm(["vllm", "serve", "--model", "m", *line], vllm.VERSION)
        except WorkloadExit as exit_:
            refused.append((line, str(exit_)))
    assert refused == []
