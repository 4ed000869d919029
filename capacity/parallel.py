"""How one replica's GPUs are split into ranks: the one computation that capacity admission, the planner and
the renderer share, so the GPUs a pod holds and the tensor parallelism the engine runs cannot disagree.

The engines count ranks across the nodes of a multi-node replica, so a replica has gpus_per_replica ×
nodes_per_replica ranks. Tensor parallelism defaults to those ranks ÷ pipeline parallelism (as KServe and
OME derive it); an explicit TP × PP that leaves ranks idle is refused, unless vLLM can run the spare GPUs as
data-parallel ranks of one server (`--data-parallel-size`, single node only).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Parallelism:
    """Tensor, pipeline and data parallelism of one replica; tp × pp × dp is its GPU count."""

    tp: int
    pp: int = 1
    dp: int = 1


class ParallelismError(ValueError):
    """A TP × PP that does not use a replica's GPUs; `field` is the setting to change."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


def effective_parallelism(gpus_per_replica: int, nodes_per_replica: int, tp: int | None, pp: int = 1, *,
                          engine: str = "vllm") -> Parallelism:
    """The parallelism a replica of `gpus_per_replica` GPUs on each of `nodes_per_replica` nodes runs with;
    `tp` None means unset. Raises ParallelismError naming the setting when GPUs would sit idle."""
    ranks = gpus_per_replica * nodes_per_replica
    if pp < 1 or ranks % pp:
        raise ParallelismError("pipeline_parallel_size", f"pipeline_parallel_size {pp} does not divide the "
                               f"{ranks} GPU(s) of a replica")
    if tp is None:
        return Parallelism(tp=ranks // pp, pp=pp)
    used = tp * pp
    if tp < 1 or used > ranks:
        raise ParallelismError("tensor_parallel_size", f"tensor_parallel_size {tp} × pipeline_parallel_size "
                               f"{pp} needs {max(used, 0)} GPU(s); a replica has {ranks}")
    if used == ranks:
        return Parallelism(tp=tp, pp=pp)
    if engine == "vllm" and nodes_per_replica == 1 and ranks % used == 0:
        return Parallelism(tp=tp, pp=pp, dp=ranks // used)
    if ranks % used:
        spare = f"{ranks} is not a multiple of {used}"
    elif engine == "vllm":
        spare = "vLLM runs spare GPUs as data-parallel ranks only within one node"
    else:
        spare = f"{engine} is not given data-parallel ranks here"
    raise ParallelismError("tensor_parallel_size", f"tensor_parallel_size {tp} × pipeline_parallel_size {pp} "
                           f"uses {used} of the {ranks} GPU(s) of a replica and leaves the rest idle ({spare}); "
                           f"leave tensor_parallel_size unset to use all {ranks}")
