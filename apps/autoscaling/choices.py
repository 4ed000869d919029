"""Vocabularies of the built-in autoscaler: what an evaluation did and which rule decided or limited it."""

from django.db import models


class ScalingAction(models.TextChoices):
    SCALED = "scaled", "Scaled"
    HELD = "held", "Held"  # a change was recommended but a window or a disabled policy kept the count
    BLOCKED = "blocked", "Blocked"  # the change could not be made: quota, free GPUs or the scale call failed
    SLEPT = "slept", "Put to sleep"  # idle: the replicas sleep (vLLM's sleep mode) instead of going to zero
    WOKEN = "woken", "Woken"  # a request woke the sleeping replicas (the gateway's activation)


class ScalingRule(models.TextChoices):
    """The rule that decided or limited a result; the HPA's condition reasons where one exists."""

    METRIC = "metric", "Metric above or below target"
    TOLERANCE = "tolerance", "Within tolerance"
    NO_METRICS = "no_metrics", "No metrics"
    SLO_GUARD = "slo_guard", "SLO guard"
    PREFILL_FLOOR = "prefill_floor", "TTFT at the prompts' own prefill time: more replicas would not help"
    QUEUE_TIME = "queue_time", "Queue time against half the TTFT allowance"
    PREFILL_BACKLOG = "prefill_backlog", "Prompt tokens waiting against the replicas' prefill rate"
    PREFILL_LOAD = "prefill_load", "Prompt tokens/s against the replicas' prefill rate"
    DECODE_PRESSURE = "decode_pressure", "Running sequences or KV-cache usage against decode capacity"
    FORECAST = "forecast", "Load forecast a cold start ahead"
    SPIKE_DECAY = "spike_decay", "Burst over: shorter scale-down window"
    REACTIVE_FLOOR = "reactive_floor", "The reactive rules' ask: the floor under the signals"
    SCALE_UP_STABILIZED = "ScaleUpStabilized", "Scale-up stabilization window"
    SCALE_DOWN_STABILIZED = "ScaleDownStabilized", "Scale-down stabilization window"
    SCALE_UP_LIMIT = "ScaleUpLimit", "Scale-up rate policy"
    SCALE_DOWN_LIMIT = "ScaleDownLimit", "Scale-down rate policy"
    TOO_MANY_REPLICAS = "TooManyReplicas", "Capped at the pool's maximum replicas"
    TOO_FEW_REPLICAS = "TooFewReplicas", "Brought up to or held at the pool's minimum replicas"
    DISABLED = "disabled", "Scaling disabled by selectPolicy"
    ACTIVATION = "activation", "Activation from zero"
    IDLE_TO_ZERO = "idle_to_zero", "Idle: scale to zero"
    COLD_START = "cold_start", "Cold start longer than the idle gap"
    IDLE_TO_SLEEP = "idle_to_sleep", "Idle: sleep instead of scaling to zero"
    WAKE = "wake", "Woken from sleep by a request"
    QUOTA = "quota", "Tenant GPU quota"
    CAPACITY = "capacity", "Free GPUs of the type"
    SCALE_FAILED = "scale_failed", "The scale action failed"
