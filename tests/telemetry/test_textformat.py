"""The fast reader of engine expositions against prometheus_client, its oracle.

`fast_families(text, ...)` must give exactly what `library_families(select_lines(text, ...))` gives
(names, types, labels, values and their int/float type), or None so that the library reads the text. It
must never accept a text the library refuses. Checked on real kubesim vLLM and SGLang expositions, on
awkward hand-written lines, and on a thousand seeded mutations of a real exposition.
"""

from __future__ import annotations

import asyncio
import math
import random

import pytest

from apps.telemetry.exposition import ENGINES, NotAnEngineExposition, detect_engine, figure_families, parse_snapshot
from apps.telemetry.textformat import fast_families, library_families, select_lines
from kubesim.engines.harness import metrics_after, pod_context

ENGINE_ARGS = {
    "vllm": ("vllm/vllm-openai:v0.33.0", ["--model", "meta-llama/Llama-3.1-8B-Instruct"]),
    "vllm-dp2": ("vllm/vllm-openai:v0.33.0", ["--model", "meta-llama/Llama-3.1-8B-Instruct",
                                              "--data-parallel-size", "2"]),
    "sglang": ("lmsysorg/sglang:latest", ["python3", "-m", "sglang.launch_server", "--model-path",
                                          "Qwen/Qwen2.5-7B-Instruct", "--enable-metrics"]),
}


def _exposition(image: str, args: list[str]) -> str:
    requests = [{"prompt": "hello " * (20 + 7 * i), "max_tokens": 8 + i} for i in range(12)]
    return asyncio.run(metrics_after(pod_context(image, args, gpu_count=2, seed=11), requests))


@pytest.fixture(scope="module")
def real():
    """/metrics of simulated engines after some traffic, by kind."""
    return {kind: _exposition(*ENGINE_ARGS[kind]) for kind in ENGINE_ARGS}


def canonical(families):
    """Families with each value as (type name, repr): 1 and 1.0 differ, NaN equals NaN."""
    return [(name, kind, [(sample, labels, type(value).__name__, repr(value)) for sample, labels, value in samples])
            for name, kind, samples in families]


def library_outcome(text, prefix, wanted):
    try:
        return canonical(library_families(select_lines(text, prefix, wanted)))
    except ValueError:
        return "refused"


def assert_same(text, engine="vllm", fast_expected=None):
    """The fast reader agrees with the library on `text` (or leaves it to the library); returns whether it
    read it. `fast_expected` asserts which of the two happened."""
    prefix, wanted = ENGINES[engine].prefix, figure_families(engine)
    fast = fast_families(text, prefix, wanted)
    if fast is not None:
        assert canonical(fast) == library_outcome(text, prefix, wanted)
    if fast_expected is not None:
        assert (fast is not None) == fast_expected
    return fast is not None


# --- Real expositions -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(ENGINE_ARGS))
def test_real_engine_expositions_are_read_fast_and_exactly_as_the_library_reads_them(real, kind):
    text = real[kind]
    engine = detect_engine(text)
    assert engine == kind.split("-")[0]
    assert assert_same(text, engine, fast_expected=True)
    snap = parse_snapshot(text, 1.0)
    # What the figures need is there: both latency histograms with their buckets, tokens, queue gauges.
    names = ENGINES[engine]
    assert snap.histograms[names.ttft] and snap.histograms[names.itl]
    assert snap.counters[names.generation_tokens] and names.running in snap.gauges
    assert snap.model
    if kind == "vllm-dp2":
        assert {dict(key)["engine"] for key in snap.gauges[names.running]} == {"0", "1"}


@pytest.mark.parametrize("kind", list(ENGINE_ARGS))
def test_crlf_line_ends_are_left_to_the_library_and_read_the_same(real, kind):
    text = real[kind]
    engine = detect_engine(text)
    crlf = text.replace("\n", "\r\n")
    assert fast_families(crlf, ENGINES[engine].prefix, figure_families(engine)) is None
    assert parse_snapshot(crlf, 1.0) == parse_snapshot(text, 1.0)


# --- Awkward lines ----------------------------------------------------------------------------------------

HEAD = "# HELP vllm:num_requests_running Running.\n# TYPE vllm:num_requests_running gauge\n"
RUNNING = "vllm:num_requests_running"


@pytest.mark.parametrize(("lines", "fast"), [
    ('{model_name="m"} NaN', True),
    ('{model_name="m"} +Inf', True),
    ('{model_name="m"} -Inf', True),
    ("  3", None),  # two spaces: the library reads it; the fast reader may leave it
    (" 3", True),  # no labels at all
    ("{} 3", True),
    ('{model_name="m",} 3', True),  # a trailing comma
    ('{model_name="m"} 3 1700000000000', True),  # a timestamp
    ('{model_name="m"} 3.5e-3 -17', True),
    ('{model_name="m"} -0', True),
    ('{model_name="m"} +5', True),
    ('{model_name="m"} .5', True),
    ('{model_name="m"} 5.', True),
    ('{model_name="m"} 1e3', True),
    ('{model_name="m"} ' + "9" * 700, False),  # longer than int() reads at every digit limit
    ('{model_name="a}b,c=d#e"} 3', True),  # braces, commas and equals inside a value
    ('{model_name=""} 3', True),
    ('{model_name="say \\"hi\\""} 3', False),  # escaped quotes
    ('{model_name="back\\\\slash"} 3', False),
    ('{model_name="line\\nbreak"} 3', False),
    ('{model_name="naïve"} 3', False),  # not ASCII
    ('{model_name="m"}\t3', None),  # a tab: select_lines drops it, and so must the fast reader
    ('{model_name="m"} 3 ', False),  # trailing space
    ('{model_name="m"} nan', False),
    ('{model_name="m"} inf', False),
    ('{ model_name="m" } 3', False),
    ('{model_name="m",engine="0"} 3', True),
    ('{engine="0",model_name="m"} 3', True),
])
def test_awkward_sample_lines_are_read_as_the_library_reads_them(lines, fast):
    assert_same(HEAD + RUNNING + lines + "\n", fast_expected=fast)


@pytest.mark.parametrize("text", [
    HEAD + RUNNING + '{model_name="m",model_name="n"} 3\n',  # duplicate label
    HEAD + RUNNING + '{__name__="x"} 3\n',  # reserved label
    HEAD + RUNNING + '{model_name="m"}\n',  # no value
    HEAD + RUNNING + '{model_name="m"} three\n',
    HEAD + RUNNING + '{model_name="m"} 1_000\n',
    HEAD + RUNNING + '{model_name="m"} 3 4 5 x\n',
    HEAD + RUNNING + '{model_name="m" 3\n',
    HEAD + RUNNING + '{model_name=m} 3\n',
    HEAD + RUNNING + "\n",
    "# TYPE vllm:num_requests_running\n" + RUNNING + " 3\n",  # a TYPE without a type
    "# TYPE vllm:num_requests_running nonsense\n" + RUNNING + " 3\n",
])
def test_broken_lines_of_the_figures_families_are_refused_by_both(text):
    prefix, wanted = "vllm:", figure_families("vllm")
    assert fast_families(text, prefix, wanted) is None
    assert library_outcome(text, prefix, wanted) == "refused"
    with pytest.raises(NotAnEngineExposition):
        parse_snapshot(text)


@pytest.mark.parametrize("bucket", ["", '{le="x"}', '{le=""}'])
def test_a_bucket_without_a_readable_bound_is_not_an_engine_exposition(bucket):
    text = f"# TYPE vllm:time_to_first_token_seconds histogram\nvllm:time_to_first_token_seconds_bucket{bucket} 3\n"
    assert_same(text, fast_expected=True)  # the lines parse; the bound is what the snapshot cannot read
    with pytest.raises(NotAnEngineExposition, match="le"):
        parse_snapshot(text)


def test_garbage_outside_the_figures_families_is_ignored_by_both():
    text = HEAD + RUNNING + ' 3\nvllm:other{broken="\n# TYPE vllm:other nonsense\nnot a metric at all\n'
    assert assert_same(text, fast_expected=True)
    assert parse_snapshot(text).gauges["num_requests_running"] == {(): 3}


@pytest.mark.parametrize("text", [
    # Samples before any HELP or TYPE: each is its own untyped family.
    'vllm:num_requests_running{model_name="m"} 1\nvllm:prompt_tokens_total 5\n',
    # A counter declared without _total: its samples get _total, and a _total sample becomes its own family.
    "# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens 5\nvllm:prompt_tokens_total 6\n",
    # The type changes after samples: every sample of the family follows the last TYPE.
    "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 2\n# TYPE vllm:num_requests_running counter\n",
    # HELP after TYPE of the same family keeps the type; HELP of another family starts an untyped one.
    "# TYPE vllm:num_requests_running gauge\n# HELP vllm:num_requests_running x\nvllm:num_requests_running 2\n"
    "# HELP vllm:num_requests_waiting y\nvllm:num_requests_waiting 4\n",
    # _created gauges of counters and histograms, a histogram's _created sample without its own TYPE.
    "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total 5\n# TYPE vllm:prompt_tokens_created gauge\n"
    "vllm:prompt_tokens_created 1.7e9\n# TYPE vllm:time_to_first_token_seconds histogram\n"
    'vllm:time_to_first_token_seconds_bucket{le="+Inf"} 3\nvllm:time_to_first_token_seconds_created 1.7e9\n',
    # A comment naming a family in a way the library ignores.
    "# UNIT vllm:num_requests_running requests\nvllm:num_requests_running 1\n",
    "#  TYPE  vllm:num_requests_running  gauge\nvllm:num_requests_running 1\n",
    "",
    "\n\n",
])
def test_family_grouping_follows_the_library(text):
    assert_same(text)


@pytest.mark.parametrize("shape", ["", "\n", "\n\n"])
def test_the_last_line_may_end_without_a_newline(shape):
    text = HEAD + RUNNING + ' 3\nvllm:num_requests_waiting{model_name="m"} 4' + shape
    assert assert_same(text, fast_expected=True)


# --- Mutations of a real exposition -----------------------------------------------------------------------

TRICKY = ['"', "\\", "{", "}", ",", "=", " ", "  ", "\t", "#", "\n", "\r", "\x0b", "\x1c", "\x85", "é", "_",
          "e", "E", "+", "-", ".", "0", "9", "Inf", "NaN", "le", "_total", "_created", "_bucket", "# HELP ",
          "# TYPE ", "vllm:", "counter", "gauge", "histogram", "summary", "__name__"]


def mutate(rng: random.Random, lines: list[str]) -> str:
    lines = list(lines)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(lines))
        move = rng.random()
        if move < 0.6:
            at = rng.randrange(len(lines[i]) + 1)
            if rng.random() < 0.5:
                lines[i] = lines[i][:at] + rng.choice(TRICKY) + lines[i][at:]
            else:
                lines[i] = lines[i][:at] + lines[i][at + rng.randint(1, 3):]
        elif move < 0.75:
            lines.insert(rng.randrange(len(lines) + 1), lines[i])
        elif move < 0.9:
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        else:
            del lines[i]
    return "\n".join(lines) + rng.choice(["\n", "", "\n\n"])


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_a_thousand_mutated_expositions_are_read_as_the_library_reads_them(real, kind):
    engine = detect_engine(real[kind])
    prefix, wanted = ENGINES[engine].prefix, figure_families(engine)
    # Mutate the lines that matter (the figures' families) more often than the rest.
    kept = set(select_lines(real[kind], prefix, wanted).splitlines())
    lines = real[kind].splitlines()
    focus = [line for line in lines if line in kept]
    rng = random.Random(20260)
    fast_read = refused = 0
    for _ in range(1200):
        text = mutate(rng, focus if rng.random() < 0.8 else lines)
        fast = fast_families(text, prefix, wanted)
        expected = library_outcome(text, prefix, wanted)
        if fast is None:
            refused += expected == "refused"
            continue
        fast_read += 1
        assert canonical(fast) == expected, text
    print(kind, {"read fast": fast_read, "refused by the library": refused})
    # Both paths were exercised: most mutations stay in the common shape, many are refused by the library.
    assert fast_read > 600 and refused > 100, (fast_read, refused)


def test_a_nan_sample_read_fast_is_still_nan():
    text = HEAD + RUNNING + '{model_name="m"} NaN\n'
    assert math.isnan(parse_snapshot(text).gauges["num_requests_running"][(("model_name", "m"),)])
