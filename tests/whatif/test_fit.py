"""`manage.py calibrate`: the lab's step-time coefficients fitted to a service's stored latencies."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from apps.core.models import AuditEntry
from apps.gateway.models import UsageRow
from apps.telemetry.models import SERVICE_ROLE, SeriesPoint
from apps.whatif.models import EngineFit
from apps.whatif.scenarios import base_roofline, scenario
from capacity.roofline import Roofline
from tests.factories import InferenceServiceFactory

pytestmark = pytest.mark.django_db

# The hardware this service "ran on": coefficients unlike the model's defaults (0.5, 0.7, 2 ms).
TRUE_FLOPS, TRUE_BANDWIDTH, TRUE_OVERHEAD_S = 0.35, 0.55, 0.004


@pytest.fixture
def service():
    return InferenceServiceFactory(
        tenant__slug="alpha", name="chat",
        pools=[{"role": "engine", "replicas": 2, "min_replicas": 1, "max_replicas": 4, "gpu_type": "l4-24gb"}],
        engine_settings={"max_model_len": 8192})


def observe(service, now, intervals: int = 40):
    """An hour of stored telemetry from engines with the true coefficients: every prompt 1,000 tokens and every
    output 100 (so each decode attends 1,000 + 100 / 2 tokens), batches of 1 to 20 per replica; the ITL p50 of an
    interval is one decode step of its batch, its TTFT p50 (nothing waiting) one prefill beside those decodes."""
    base, chunk = base_roofline(service)
    true = Roofline(base.model, base.gpu, base.tp, base.weight_bytes_rank, base.kv_bytes_per_token_rank,
                    flops_fraction=TRUE_FLOPS, bandwidth_fraction=TRUE_BANDWIDTH, step_overhead_s=TRUE_OVERHEAD_S)
    for i in range(intervals):
        batch = 1 + i % 20
        at = now - timedelta(seconds=15 * (i + 1))
        SeriesPoint.objects.create(
            service=service, role=SERVICE_ROLE, time=at, ready_replicas=2, running=2 * batch, waiting=0.0,
            prefix_hit_rate=0.0, itl_p50=true.step_time((), [1050] * batch),
            ttft_p50=true.prefill_seconds(1000, chunk, [1050] * batch))
        UsageRow.objects.create(at=at, tenant=service.tenant, service_id=service.pk, model="chat", status=200,
                                prompt_tokens=1000, completion_tokens=100, duration_ms=5.0)


def test_the_fit_recovers_the_coefficients_the_engines_ran_with_and_the_lab_replays_with_them(service, capsys):
    observe(service, timezone.now())
    call_command("calibrate", "--service", "alpha/chat", "--apply", "--json")
    out = json.loads(capsys.readouterr().out)
    assert out["coefficients"]["decode_bandwidth_fraction"] == pytest.approx(TRUE_BANDWIDTH, abs=0.01)
    assert out["coefficients"]["step_overhead_ms"] == pytest.approx(TRUE_OVERHEAD_S * 1000, abs=0.3)
    assert out["coefficients"]["prefill_flops_fraction"] == pytest.approx(TRUE_FLOPS, abs=0.01)
    assert out["decode_samples"] == 40 and out["prefill_samples"] == 40 and out["itl_error_pct"] < 1.0
    fit = EngineFit.objects.get(service=service)
    assert fit.applied and AuditEntry.objects.filter(object_id=str(fit.pk)).exists()
    physics = scenario(service, {}, "current").spec.core.physics
    assert (physics.prefill_flops_fraction, physics.decode_bandwidth_fraction) == (
        out["coefficients"]["prefill_flops_fraction"], out["coefficients"]["decode_bandwidth_fraction"])
    assert physics.step_overhead_s == pytest.approx(out["coefficients"]["step_overhead_ms"] / 1000)


def test_a_fit_not_applied_leaves_the_lab_on_the_models_defaults(service, capsys):
    observe(service, timezone.now())
    call_command("calibrate", "--service", "alpha/chat")
    assert "Not applied" in capsys.readouterr().out
    physics = scenario(service, {}, "current").spec.core.physics
    assert (physics.prefill_flops_fraction, physics.decode_bandwidth_fraction, physics.step_overhead_s) == (
        0.5, 0.7, 0.002)


def test_too_little_telemetry_is_refused_and_stores_nothing(service):
    observe(service, timezone.now(), intervals=2)
    with pytest.raises(CommandError, match=r"2 intervals with decoding requests.*at least 3"):
        call_command("calibrate", "--service", "alpha/chat", "--apply")
    with pytest.raises(CommandError, match="No service 'alpha/nope'"):
        call_command("calibrate", "--service", "alpha/nope")
    assert not EngineFit.objects.exists()
