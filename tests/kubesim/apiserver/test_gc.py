"""The API server's garbage-collector tuning (`tune_gc`, as `python -m kubesim serve` runs): objects are
frozen out of the collector's sight every second, and the full pass that frees cyclic garbage frozen while
still alive runs only once the frozen objects have grown by a set share, not on a timer."""

from __future__ import annotations

import gc
import time
import weakref

from kubesim.apiserver.server import Server, full_pass_due
from tests.polling import wait_for


def test_a_full_pass_is_due_once_the_frozen_objects_doubled():
    assert not full_pass_due(200, 100)
    assert full_pass_due(201, 100)
    assert not full_pass_due(1_000_000, 1_000_000)  # a steady store: no stall for nothing
    assert full_pass_due(126, 100, growth=0.25) and not full_pass_due(125, 100, growth=0.25)


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_frozen_cyclic_garbage_is_freed_when_the_frozen_objects_grow_and_not_before():
    server = Server(port=0, tune_gc=True)
    server.gc_check_rounds = 1  # count every second instead of every minute
    server.gc_full_pass_growth = 0.25  # doubling all of the test process's objects would take long: a quarter
    server.start_in_thread()
    try:
        time.sleep(2.5)  # the first count is the baseline
        garbage = Cycle()
        ref = weakref.ref(garbage)
        time.sleep(2.5)  # frozen while alive
        del garbage
        time.sleep(3.5)  # counted three times without growth: no full pass, the cycle stays
        assert ref() is not None
        ballast = [[i] for i in range(int(gc.get_freeze_count() * 0.3) + 1)]  # a quarter more, and then some
        wait_for(lambda: ref() is None, timeout=15, message="the frozen cycle freed by a full pass")
        del ballast
    finally:
        server.stop_in_thread()
        gc.unfreeze()
