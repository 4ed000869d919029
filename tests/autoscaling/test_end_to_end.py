"""The built-in autoscaler end to end, in real time against kubesim, with a real Celery worker doing the
scrapes, evaluations and reconciles (the test plays beat, sending the periodic tasks every second):
load rises → a decision → replicas go up → pods Ready → TTFT falls; load stops → scale down after the
window → the serverless service goes to zero → a new request is held by the router, activates the service
and is answered. Windows are seconds instead of minutes to keep it short."""

from __future__ import annotations

import json
import statistics
import threading
import time
import urllib.request

import pytest

from apps.autoscaling.models import ScalingDecision
from apps.serving.models import Pool
from apps.telemetry.models import SeriesPoint
from tests.polling import wait_for
from tests.telemetry.conftest import deploy, proxy_base, sim, sim_cluster  # noqa: F401 (fixtures)
from tests.workers.conftest import workers  # noqa: F401 (the real-worker fixture)
from workers.tasks import autoscale, telemetry

pytestmark = pytest.mark.integration

POLICY = {
    "autoscaler": "builtin",
    "targets": {"running_requests_per_replica": 4},
    "behavior": {"scale_down": {"stabilization_window_s": 4}},
    "scale_to_zero_after_seconds": 4,
}


def complete(base: str, model: str, i: int, timeout: float = 120) -> float:
    """One completion through the service proxy; returns its wall time."""
    body = json.dumps({"model": model, "prompt": "Summarise the plan. " * 300 + str(i), "max_tokens": 64,
                       "ignore_eos": True}).encode()
    request = urllib.request.Request(f"{base}/v1/completions", data=body, headers={"Content-Type": "application/json"})
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=timeout) as response:
        assert json.loads(response.read())["usage"]["completion_tokens"] == 64
    return time.monotonic() - started


class Load:
    """`concurrency` clients sending completions back to back until stopped."""

    def __init__(self, base: str, model: str, concurrency: int):
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._client, args=(base, model, i), daemon=True)
                        for i in range(concurrency)]

    def _client(self, base, model, i):
        n = 0
        while not self.stop.is_set():
            complete(base, model, i * 10_000 + n)
            n += 1

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(120)


class Beat:
    """Sends the scrape to the worker every `period` seconds, and the autoscale evaluation too once
    `autoscale` is set (so a test can measure a baseline before the autoscaler may act)."""

    def __init__(self, period: float = 1.0):
        self.period = period
        self.stop = threading.Event()
        self.autoscale = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.is_set():
            telemetry.scrape.apply_async(expires=self.period * 3)
            if self.autoscale.is_set():
                autoscale.evaluate_all.apply_async(expires=self.period * 3)
            self.stop.wait(self.period)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(10)


# Each engine runs at most SEQS sequences, so CLIENTS clients queue on one replica (TTFT includes waiting
# for a slot) and fit three replicas without waiting: the TTFT difference is the queue, not noise.
SEQS, CLIENTS = 8, 20


def replicas(service) -> int:
    return Pool.objects.get(service=service).replicas


def test_load_scales_up_then_down_to_zero_and_a_request_activates_it(deploy, tenant_a, sim, workers, settings):  # noqa: F811
    service = deploy(tenant_a, "burst", deployment_mode="serverless", autoscaling=POLICY,
                     engine_settings={"max_num_seqs": SEQS},
                     pools=[{"role": "engine", "replicas": 1, "min_replicas": 0, "max_replicas": 3,
                             "gpu_type": "h100-sxm-80gb"}])
    base, model = proxy_base(sim, service), service.model.name
    workers(1)
    with Beat() as beat:
        with Load(base, model, concurrency=CLIENTS):
            # A baseline first: TTFT with the load queued on the one replica, before the autoscaler may act
            # (otherwise it can scale up before a second scrape and leave nothing to compare against).
            baseline = SeriesPoint.objects.filter(service=service, role="", ready_replicas=1, ttft_p95__isnull=False,
                                                  waiting__gt=0)
            wait_for(lambda: baseline.count() >= 3, timeout=120, message="a queued baseline on one replica")
            beat.autoscale.set()
            up = wait_for(lambda: ScalingDecision.objects.filter(service=service, action="scaled",
                                                                 desired_replicas__gt=1).order_by("time").first(),
                          timeout=120, message="a scale-up decision")
            assert up.current_replicas == 1 and up.metrics[0]["name"] == "running_requests_per_replica"
            # Whichever asks for more decides: the running target, the pods' prompt tokens/s against the
            # H100's prefill rate from the capacity planner (prompts of ~1,500 tokens from every client), or the
            # engines' queue time (their histogram, read live) or the prompt tokens waiting.
            if up.rule == "prefill_load":
                assert "prompt tokens/s = " in up.reason and "prefill rate (target 40%)" in up.reason
                assert any(m["name"] == "prefill_utilisation" and m["replicas"] > 1 for m in up.metrics)
            elif up.rule == "queue_time":
                assert up.reason.startswith("queue time p95 ") and up.signals["queue_time_p95_s"] > 1.0
            elif up.rule == "prefill_backlog":
                assert "prompt tokens waiting" in up.reason and up.signals["waiting_prompt_tokens"] > 0
            else:
                assert "running" in up.reason and "> target 4" in up.reason
            wait_for(lambda: SeriesPoint.objects.filter(service=service, role="", ready_replicas=3,
                                                        ttft_p95__isnull=False).count() >= 3,
                     timeout=180, message="the new replicas Ready and serving")
            time.sleep(2)
        # TTFT under the same load, before and after the new replicas were Ready.
        before = [p.ttft_p95 for p in baseline]
        after = [p.ttft_p95 for p in SeriesPoint.objects.filter(service=service, role="", ttft_p95__isnull=False,
                                                               running__gt=0, ready_replicas=3)]
        assert before and after
        assert statistics.median(after) < statistics.median(before)

        wait_for(lambda: replicas(service) == 0, timeout=180, message="scaled to zero after the load stopped")
        rules = list(ScalingDecision.objects.filter(service=service, action="scaled").order_by("time")
                     .values_list("rule", flat=True))
        assert rules[-1] == "idle_to_zero"
        wait_for(lambda: not SeriesPoint.objects.filter(service=service).order_by("-time").first().ready_replicas,
                 timeout=60, message="no engine left")

        took = complete(base, model, 1)  # held by the router until the service is activated
    activation = ScalingDecision.objects.filter(service=service, rule="activation").first()
    assert activation is not None and (activation.current_replicas, activation.desired_replicas) == (0, 1)
    assert took > 0.5  # it waited for an engine to start
