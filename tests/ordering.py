"""Longest tests first, so that parallel workers do not wait at the end for one long test.

pytest-xdist hands tests to workers in collection order, and the collection ends with the slowest directories
(`tests/workers/`, after `tests/web/`): a chaos campaign or a schema fuzz started last keeps the run going minutes
after the other workers are idle. With `-n`, every worker puts the tests that `tests/durations.json` names first,
longest first, and leaves the others in their order. A serial run keeps pytest's order.

`tests/durations.json` holds each test's setup + call + teardown seconds from a whole run, for the tests that
took at least a second. `make durations` writes it again (`--store-durations PATH`). A test missing from it
(new, or renamed) only runs in its place in the collection; nothing fails for a stale file.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

FILE = Path(__file__).with_name("durations.json")
KEPT_ABOVE = 1.0  # seconds; shorter tests do not change where a run ends


def bare(nodeid: str) -> str:
    """The node id without `--dist loadgroup`'s `@group` suffix."""
    return nodeid.rsplit("@", 1)[0] if "@" in nodeid.rsplit("::", 1)[-1] else nodeid


def pytest_addoption(parser):
    parser.addoption("--store-durations", metavar="PATH", default=None,
                     help="write each test's seconds (setup + call + teardown, those of at least 1 s) to PATH as JSON")


def pytest_configure(config):
    path = config.getoption("store_durations")
    if path and not hasattr(config, "workerinput"):  # the controller (or a serial run) sees every report
        config.pluginmanager.register(DurationStore(Path(path)), "duration-store")


class DurationStore:
    def __init__(self, path: Path):
        self.path, self.seconds = path, defaultdict(float)

    def pytest_runtest_logreport(self, report):
        self.seconds[bare(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session):
        kept = {k: round(v, 1) for k, v in sorted(self.seconds.items(), key=lambda kv: -kv[1]) if v >= KEPT_ABOVE}
        self.path.write_text(json.dumps(kept, indent=0) + "\n")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    if not os.environ.get("PYTEST_XDIST_WORKER") or not FILE.exists():
        return
    known = json.loads(FILE.read_text())
    # A stable sort: the named tests, longest first, then the rest in collection order.
    items.sort(key=lambda item: -known.get(bare(item.nodeid), 0.0))
