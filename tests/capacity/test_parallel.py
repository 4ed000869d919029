"""capacity.parallel: the GPUs of a replica and its tensor/pipeline/data parallelism are one fact."""

from __future__ import annotations

import pytest

from capacity.parallel import Parallelism, ParallelismError, effective_parallelism


def test_unset_tp_is_the_replicas_gpus_over_pipeline_parallelism():
    assert effective_parallelism(4, 1, None) == Parallelism(tp=4, pp=1)
    assert effective_parallelism(8, 1, None, 2) == Parallelism(tp=4, pp=2)


def test_multi_node_counts_the_ranks_of_every_node_as_the_engines_do():
    # 2 nodes x 8 GPUs = 16 ranks; PP 2 leaves TP 8.
    assert effective_parallelism(8, 2, None, 2) == Parallelism(tp=8, pp=2)
    assert effective_parallelism(8, 2, 8, 2) == Parallelism(tp=8, pp=2)


def test_vllm_runs_spare_gpus_of_one_node_as_data_parallel_ranks():
    assert effective_parallelism(4, 1, 1) == Parallelism(tp=1, pp=1, dp=4)
    assert effective_parallelism(8, 1, 2, 2) == Parallelism(tp=2, pp=2, dp=2)


@pytest.mark.parametrize(("gpus", "nodes", "tp", "pp", "engine", "field", "words"), [
    (4, 1, 1, 1, "sglang", "tensor_parallel_size", "uses 1 of the 4 GPU(s)"),
    (3, 1, 2, 1, "vllm", "tensor_parallel_size", "3 is not a multiple of 2"),
    (8, 2, 4, 2, "vllm", "tensor_parallel_size", "only within one node"),
    (2, 1, 4, 1, "vllm", "tensor_parallel_size", "needs 4 GPU(s); a replica has 2"),
    (4, 1, None, 3, "vllm", "pipeline_parallel_size", "pipeline_parallel_size 3 does not divide the 4 GPU(s)"),
])
def test_idle_gpus_are_refused_naming_the_setting(gpus, nodes, tp, pp, engine, field, words):
    with pytest.raises(ParallelismError) as exc:
        effective_parallelism(gpus, nodes, tp, pp, engine=engine)
    assert exc.value.field == field
    assert words in exc.value.message
