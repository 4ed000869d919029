"""What the what-if lab's time plots span (apps/web/portal/lab.py `_time_axis`): the whole load, the drain after
its last arrival when a timeline runs on, and at least a second; and that span in words under a sparse plot."""

from __future__ import annotations

from apps.web.portal.lab import _time_axis


def scenario(*times: float) -> dict:
    return {"timeline": [{"t": t, "replicas": 1, "ttft_p95_s": 0.2} for t in times]}


def test_the_plots_span_the_whole_load_however_few_periods_were_kept():
    assert _time_axis({"duration_s": 3600}, [scenario(0, 300), scenario(0, 300)]) == {
        "span_s": 3600, "span": "the load's 60m"}


def test_a_timeline_that_runs_on_while_the_last_requests_drain_widens_the_axis():
    assert _time_axis({"duration_s": 100}, [scenario(0, 60, 130), scenario(0, 60)])["span_s"] == 130


def test_a_load_of_one_request_still_has_an_axis_and_no_result_has_one_too():
    assert _time_axis({"duration_s": 0}, [scenario(0)]) == {"span_s": 1.0, "span": "the load's 0s"}
    assert _time_axis(None, []) == {"span_s": 1.0, "span": "the load's 0s"}
