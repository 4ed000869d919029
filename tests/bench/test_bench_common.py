"""bench/common.py's process helpers: the tree of a process and its resident memory, read from /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench.common import process_tree, rss_megabytes, tree_cpu_seconds


def test_the_tree_of_a_process_holds_its_child_and_grandchild_and_their_memory():
    # A child that starts a grandchild sleeping for a while: both are descendants of the child.
    script = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); " \
             "time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 20
        while len(process_tree(child.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        tree = process_tree(child.pid)
        assert child.pid in tree and len(tree) == 2
        assert os.getpid() not in tree  # the parent is not a descendant
        # Each is a running Python interpreter: more than 1 MB resident, and far less than 1 GB.
        assert all(1 < rss_megabytes(pid) < 1024 for pid in tree)
        assert tree_cpu_seconds(child.pid) >= 0
    finally:
        for pid in process_tree(child.pid) - {child.pid}:
            os.kill(pid, 9)
        child.kill()
        child.wait()
    assert rss_megabytes(child.pid) == 0.0  # gone: no memory to report
