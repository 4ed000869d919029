"""Golden manifests for every deployment mode × engine.

The expected documents live in tests/serving/golden/<mode>-<engine>.yaml and were checked line by line
against reference/engines.md (flags, ports, endpoints) and gpus-and-models.md (GPU products, model
sizes). Pod-template hashes are left out of the files and checked separately by recomputing them.
"""

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from apps.serving.rendering import render_service
from tests.serving.golden.specs import SPECS

GOLDEN = Path(__file__).parent / "golden"
HASH = "controlplane.io/pod-template-hash"


def _without_hashes(node):
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "annotations" and isinstance(value, dict):
                value = {k: v for k, v in value.items() if k != HASH}
                if not value:
                    continue
            out[key] = _without_hashes(value)
        return out
    if isinstance(node, list):
        return [_without_hashes(v) for v in node]
    return node


def _templates(obj):
    spec = obj.get("spec", {})
    if obj["kind"] == "Deployment":
        return [spec["template"]]
    if obj["kind"] == "LeaderWorkerSet":
        lwt = spec["leaderWorkerTemplate"]
        return [lwt["leaderTemplate"], lwt["workerTemplate"]]
    return []


@pytest.mark.parametrize("name", sorted(SPECS))
def test_rendered_objects_match_the_golden_file(name):
    expected = [doc for doc in yaml.safe_load_all((GOLDEN / f"{name}.yaml").read_text()) if doc]
    rendered = _without_hashes(render_service(SPECS[name]()))
    assert [(o["kind"], o["metadata"]["name"]) for o in rendered] == [
        (o["kind"], o["metadata"]["name"]) for o in expected]
    for got, want in zip(rendered, expected, strict=True):
        assert got == want, f"{want['kind']}/{want['metadata']['name']} differs"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_pod_template_carries_the_hash_of_its_own_content(name):
    for obj in render_service(SPECS[name]()):
        for template in _templates(obj):
            bare = _without_hashes(template)
            digest = hashlib.sha256(json.dumps(bare, sort_keys=True).encode()).hexdigest()[:16]
            assert template["metadata"]["annotations"][HASH] == digest


def test_golden_files_exist_for_every_mode_and_engine():
    modes = ("standard", "pd_disaggregated", "multi_node", "serverless")
    assert sorted(SPECS) == sorted(f"{m}-{e}" for m in modes for e in ("vllm", "sglang"))
    assert all((GOLDEN / f"{name}.yaml").exists() for name in SPECS)
