"""bench/real_engine.py against the session's real engine (`--real-url`): one JSON line comparing the simulated
vLLM with the real one on the same requests, at a KV pool small enough to preempt."""

from __future__ import annotations

import json
import subprocess
import sys

from enginevocab.vllm import VERSION
from kubesim.engines.metrics import NOT_MODELLED


def _bench(url: str, variant: int) -> dict:
    run = subprocess.run([sys.executable, "bench/real_engine.py", "--json", "--real-url", url,
                          "--variant", str(variant)], capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_the_bench_compares_families_prefix_hits_and_preemptions_with_the_real_engine(real_engine):
    # 16 requests of 176 tokens (6 blocks) at once in 24 blocks: both engines preempt, when the requests reach
    # the real engine together. On a loaded machine its API server may hand them to the scheduler one by one; such a
    # run proves nothing about preemption and is made again (with another shared prefix, so its cache starts
    # cold), three times at most.
    for variant in range(3):
        out = _bench(real_engine.url, variant)
        assert out["vllm_version"] == VERSION
        assert out["missing_in_sim"] == [{"family": name, "reason": NOT_MODELLED[name]}
                                         for name in sorted(NOT_MODELLED)]
        assert out["label_mismatches"] == []
        assert out["families_real"] == out["families_sim"] + len(NOT_MODELLED)
        # 16 prompts share a 64-token prefix (two blocks of 32): the 15 after the first hit it in both engines.
        assert out["prefix_hit_tokens"] == {"sim": 15 * 64, "real": 15 * 64}
        assert out["completion_tokens"] == {"sim": 16 * 64, "real": 16 * 64}
        assert out["preemptions"]["sim"] > 0
        if out["preemptions"]["real"] > 0:
            return
    raise AssertionError(f"the real engine preempted in none of three runs (last: {out})")
