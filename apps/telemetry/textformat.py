"""The Prometheus text format read into metric families: prometheus_client for any text, and a fast path
for the lines engines actually write.

`parse_snapshot` (in `exposition.py`) needs a tenth of an engine's ~500-700 lines and parsed them with
prometheus_client's pure-Python character scanner, which was most of the scraper's CPU at 2,000 engines.
`fast_families` reads the same selected lines with one compiled regular expression over the whole text
and an exact replica of the library's grouping of lines into families. It only accepts the common shape
(`name{label="value",...} value [timestamp]`, single spaces, `# HELP`/`# TYPE` lines, ASCII, `\\n` line
ends) and returns None for anything else: an escaped quote, a tab, an unknown `# TYPE`, a duplicate or
reserved label. The caller then parses with prometheus_client, so what is read is always what the
library reads; `tests/telemetry/test_textformat.py` holds the two to the same output.

A family is `(name, type, samples)` as prometheus_client's `Metric` has it after parsing (counters
without `_total` and their samples with it, `untyped` as `unknown`); a sample is `(name, labels, value)`
where `labels` is a `Labels`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from prometheus_client.parser import text_string_to_metric_families

SAMPLE_SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")
"""The suffixes a sample name adds to its family's name."""


class Labels(NamedTuple):
    """One sample's labels, read once: sorted (name, value) pairs with and without `le`, the two labels
    the snapshot looks up, and `le` as a bucket's upper bound (None when absent or not a number)."""

    key: tuple[tuple[str, str], ...]
    key_without_le: tuple[tuple[str, str], ...]
    le: str | None
    model_name: str | None
    bound: float | None


Sample = tuple[str, Labels, float]
Family = tuple[str, str, list[Sample]]


def labels_of(labels: Mapping[str, str]) -> Labels:
    key = tuple(sorted(labels.items()))
    le = labels.get("le")
    if le is None:
        return Labels(key, key, None, labels.get("model_name"), None)
    try:
        bound = float(le)
    except ValueError:
        bound = None
    return Labels(key, tuple(p for p in key if p[0] != "le"), le, labels.get("model_name"), bound)


def family_of(metric: str) -> str:
    """The family a sample or family name belongs to (one known suffix removed)."""
    for suffix in SAMPLE_SUFFIXES:
        if metric.endswith(suffix):
            return metric[: -len(suffix)]
    return metric


def select_lines(text: str, prefix: str, wanted: frozenset[str]) -> str:
    """The lines (samples, and comments naming a metric) of the `wanted` families under `prefix`."""
    # A vLLM exposition has ~500-700 lines and the figures need a tenth of them; dropping the rest before
    # the (pure-Python) library parser cuts its CPU per engine several times over.
    keep = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(None, 3)
            metric = parts[2] if len(parts) > 2 else ""
        else:
            metric = line.split("{", 1)[0].split(" ", 1)[0]
        if metric.startswith(prefix) and family_of(metric[len(prefix) :]) in wanted:
            keep.append(line)
    return "\n".join(keep) + "\n"


def library_families(text: str) -> Iterable[Family]:
    """Every family of the text as prometheus_client parses it (ValueError when it does not parse)."""
    for metric in text_string_to_metric_families(text):
        yield metric.name, metric.type, [(s.name, labels_of(s.labels), s.value) for s in metric.samples]


# --- The fast path ----------------------------------------------------------------------------------------

# Line ends `select_lines` (str.splitlines) honours and the library (which splits on "\n" only) does not;
# a text holding one, or any non-ASCII character, is left to the library.
_OTHER_LINE_ENDS = "\r\x0b\x0c\x1c\x1d\x1e"
_LABEL = r'(?!__)[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*"'
# A value the library reads with int() (up to 640 digits, which int() reads at any digit limit), or with
# float() (a decimal point or an exponent, Inf, NaN); a timestamp may be either.
_INTEGER = r"[-+]?[0-9]{1,640}"
_FLOAT = r"[-+]?(?:(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+|Inf)|NaN"
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"')
# What the library allows in a family of each type, after the family's name; other types are left to it.
_ALLOWED = {"counter": ("",), "gauge": ("",), "histogram": ("_count", "_sum", "_bucket"), "untyped": ("",),
            "unknown": ("",)}
# Label sets read once per process: pods of one model repeat them every scrape (a vLLM engine's figures
# use ~40). A miss costs ~5 us; 50,000 sets (~0.5 kB each, ~30 MB at most) cover a thousand models.
_MAX_CACHED_LABELS = 50_000
_labels_cache: dict[str, Labels] = {}


@functools.lru_cache(maxsize=16)
def _line_pattern(prefix: str, wanted: frozenset[str]) -> re.Pattern | None:
    """One pattern, matched from each "\n", for the lines `select_lines` keeps; None when a wanted name itself
    ends with a suffix (no engine's does).

    Groups: a sample's name, labels, integer or float value (both empty: a kept sample line of another
    shape); a comment's keyword, name and rest; a kept comment line of another shape.
    """
    if any(family_of(name) != name for name in wanted):
        return None
    p = re.escape(prefix)
    # Every wanted family with any one suffix, or none: exactly the names family_of maps into `wanted`.
    families, suffixes = "|".join(map(re.escape, sorted(wanted))), "|".join(map(re.escape, SAMPLE_SUFFIXES))
    name = rf"{p}(?:{families})(?:{suffixes})?"
    # select_lines ends a sample line's metric name at "{", " " or the line's end, and keeps a comment
    # whose third whitespace-separated word is the name (ASCII: \s is str.split's whitespace).
    sample = (rf"({name})(?:(?:\{{((?:{_LABEL}(?:,{_LABEL})*,?)?)\}})?"
              rf" (?:({_INTEGER})|({_FLOAT}))(?: (?:{_INTEGER}|{_FLOAT}))?$|(?=[{{ \n]|$))")
    comment = rf"#(?: (HELP|TYPE) ({name})(?: ([^\n]*))?$|\S*[^\S\n]+\S+[^\S\n]+({name})(?=\s|$))"
    return re.compile(rf"\n(?:{sample}|{comment})", re.MULTILINE)


def _labels_from_text(text: str) -> Labels | None:
    labels = _labels_cache.get(text)
    if labels is None:
        pairs = _PAIR.findall(text)
        as_dict = dict(pairs)
        if len(as_dict) != len(pairs):
            return None  # a duplicate label name: the library raises
        labels = labels_of(as_dict)
        if len(_labels_cache) >= _MAX_CACHED_LABELS:
            _labels_cache.clear()
        _labels_cache[text] = labels
    return labels


def _metric(name: str, typ: str, samples: list[Sample]) -> Family:
    # What prometheus_client's build_metric and Metric make of a family.
    if typ == "counter":
        if name.endswith("_total"):
            name = name[:-6]
        else:
            samples = [(s[0] + "_total", s[1], s[2]) for s in samples]
    return name, "unknown" if typ == "untyped" else typ, samples


def fast_families(text: str, prefix: str, wanted: frozenset[str]) -> list[Family] | None:
    """The families `library_families(select_lines(text, prefix, wanted))` yields, or None when a kept
    line (or the text) is outside the common shape."""
    pattern = _line_pattern(prefix, wanted)
    if pattern is None or not text.isascii() or any(end in text for end in _OTHER_LINE_ENDS):
        return None
    out: list[Family] = []
    name, typ, samples, allowed = "", "untyped", [], ()
    # The library's state machine (text_fd_to_metric_families), line by line.
    for sample, label_text, whole, number, keyword, family, rest, other in pattern.findall("\n" + text):
        if keyword:
            if keyword == "HELP":
                if family != name:
                    if name:
                        out.append(_metric(name, typ, samples))
                    name, typ, samples, allowed = family, "untyped", [], (family,)
            else:
                if rest not in _ALLOWED:
                    return None
                if family != name:
                    if name:
                        out.append(_metric(name, typ, samples))
                    name, samples = family, []
                typ, allowed = rest, tuple(family + suffix for suffix in _ALLOWED[rest])
            continue
        if other or not (whole or number):
            return None
        labels = _labels_from_text(label_text)
        if labels is None:
            return None
        item = (sample, labels, int(whole) if whole else float(number))
        if item[0] in allowed:
            samples.append(item)
        else:
            if name:
                out.append(_metric(name, typ, samples))
            name, typ, samples, allowed = "", "untyped", [], ()
            out.append(_metric(item[0], "untyped", [item]))
    if name:
        out.append(_metric(name, typ, samples))
    return out
