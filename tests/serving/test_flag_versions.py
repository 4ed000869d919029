"""Flags with the engine versions that have them (enginevocab/versions.py): the argument policy, the renderer
and a Runtime's default args judge a flag against the version the runtime's image tag names.

Only one version per engine is known (vLLM 0.32.0's parser, SGLang 0.5.23's documentation), so the shipped span tables are empty; these tests
record spans the way a documented fact would (a flag added in a later version) and check each consumer."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from apps.catalog.engines import EngineSettings, get_adapter
from enginevocab import policy, vllm
from enginevocab.versions import Span, named, parse
from tests.factories import RuntimeFactory

VLLM = get_adapter("vllm")


@pytest.fixture
def mfu_metrics_since_0_31(monkeypatch):
    """--enable-mfu-metrics and --max-model-len recorded as added in vLLM 0.31.0."""
    monkeypatch.setitem(vllm.SPANS, "--enable-mfu-metrics", Span(since="0.31.0"))
    monkeypatch.setitem(vllm.SPANS, "--max-model-len", Span(since="0.31.0"))


@pytest.mark.parametrize(("tag", "version"), [
    ("v0.5.2-cu126", (0, 5, 2)), ("0.33.0", (0, 33, 0)), ("v0.5.23.post1", (0, 5, 23)), ("v0.10", (0, 10, 0)),
    ("latest", None), ("nightly-2026-01-02", None), ("", None),
])
def test_an_image_tag_names_a_version_or_none(tag, version):
    assert parse(tag) == version


def test_a_span_includes_its_first_version_and_excludes_its_last():
    span = Span(since="0.31.0", until="0.40.0")
    assert [span.has(v) for v in ("0.30.9", "0.31.0", "0.39.5", "0.40.0")] == [False, True, True, False]
    assert named("latest", "0.33.0") == "0.33.0"
    assert named("v0.30.2-cu128", "0.33.0") == "0.30.2"


def test_the_policy_refuses_a_flag_the_runtimes_version_lacks_naming_that_version(mfu_metrics_since_0_31):
    assert policy.check_args("vllm", ["--enable-mfu-metrics"], tag="v0.30.2") == [
        "--enable-mfu-metrics is not a flag of vllm 0.30.2"]
    assert policy.check_args("vllm", ["--no-enable-mfu-metrics"], tag="v0.30.2") == [
        "--no-enable-mfu-metrics is not a flag of vllm 0.30.2"]
    assert policy.check_args("vllm", ["--enable-mfu"], tag="v0.30.2") == ["--enable-mfu is not a flag of vllm 0.30.2"]
    for tag in ("v0.31.0", "v0.33.0", "latest", None):  # "latest" is judged as the vocabulary's own 0.32.0
        assert policy.check_args("vllm", ["--enable-mfu-metrics"], tag=tag) == []


def test_service_settings_and_runtime_defaults_are_judged_at_the_runtimes_version(db, mfu_metrics_since_0_31):
    settings = EngineSettings(extra_args=("--enable-mfu-metrics",))
    assert VLLM.validate(settings, tag="v0.30.2") == {
        "extra_args": "--enable-mfu-metrics is not a flag of vllm 0.30.2"}
    assert VLLM.validate(settings, tag="v0.33.0") == {}
    with pytest.raises(ValidationError) as exc:
        RuntimeFactory.build(tag="v0.30.2", default_args=["--enable-mfu-metrics"]).full_clean()
    assert exc.value.message_dict["default_args"] == ["--enable-mfu-metrics is not a flag of vllm 0.30.2"]
    RuntimeFactory.build(tag="v0.31.0", default_args=["--enable-mfu-metrics"]).full_clean()


def test_the_renderer_refuses_a_rendered_flag_the_runtimes_version_lacks(mfu_metrics_since_0_31):
    settings = EngineSettings(max_model_len=4096)
    with pytest.raises(ValueError, match=r"^--max-model-len is not a flag of vllm 0\.30\.2$"):
        VLLM.flags(settings, model_path="/models/m", served_name="m", tag="v0.30.2")
    args = VLLM.flags(settings, model_path="/models/m", served_name="m", tag="v0.31.0")
    assert args[args.index("--max-model-len") + 1] == "4096"
    # A flag the vocabulary does not know at all is the policy's to judge (a service saved before it ran).
    grandfathered = EngineSettings(extra_args=("--not-a-vllm-flag",))
    assert "--not-a-vllm-flag" in VLLM.flags(grandfathered, model_path="/models/m", served_name="m", tag="v0.30.2")


def test_a_setting_whose_flag_the_runtimes_version_lacks_is_a_field_error(mfu_metrics_since_0_31):
    settings = EngineSettings(max_model_len=4096)
    assert VLLM.validate(settings, tag="v0.30.2") == {
        "max_model_len": "--max-model-len is not a flag of vllm 0.30.2"}
    assert VLLM.validate(settings, tag="v0.31.0") == {}
    assert VLLM.validate(EngineSettings(kv_cache_dtype="fp8"), tag="v0.30.2") == {}
