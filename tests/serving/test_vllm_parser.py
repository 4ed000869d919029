"""The vocabulary against the pinned vLLM's own parser (the `engines` extra), run in one process per check.

The parser is built as `python -m vllm.entrypoints.openai.api_server` builds it (enginevocab/vllm_parser_dump.py);
every flag it has must be classified once, every flag the vocabulary names must be one of it, and every command
line the demo's vLLM services render must be one it accepts.
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
from kubesim.engines.flags import command_line
from tests.serving.test_commands import seed

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
def test_every_command_line_the_demo_renders_is_accepted_by_vllms_parser(monkeypatch):
    monkeypatch.setenv("KUBESIM_URL", "http://127.0.0.1:16443")
    seed(password="demo-pass-123")
    lines = []
    for service in InferenceService.objects.filter(runtime__engine="vllm"):
        lines += _engine_argv(render_service(spec_from_service(service)))
    assert len(lines) >= 4  # the demo's standard, P/D, multi-node (leader and worker) and serverless engines
    # The last line is one the parser refuses, so a check that accepts everything fails here.
    verdicts = _run("--check", stdin=json.dumps([*lines, ["--disable-log-requests"]]))
    assert [(line, v["error"]) for line, v in zip(lines, verdicts, strict=False) if not v["ok"]] == []
    assert verdicts[-1] == {"ok": False, "error": [
        "vllm_parser_dump.py: error: unrecognized arguments: --disable-log-requests"]}
