"""What vLLM's CPU build cannot honour, by flag, with the reason: one table for kubesim's cpu-real admission
(kubesim/engines/real.py) and the control plane's, which refuses a service placed on cpu-real nodes
(apps/serving/validation.py) before any pod is made.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from enginevocab.vllm_classes import PARSER

# Flags refused when set at all, and flags refused above a value of 1.
GPU_ONLY = {
    "--kv-transfer-config": "KV transfer between engines (NIXL, P/D disaggregation) needs GPUs",
    "--kv-offloading-size": "KV-cache offloading moves GPU memory to CPU memory; the CPU build has no GPU memory",
    "--kv-offloading-backend": "KV-cache offloading moves GPU memory to CPU memory; the CPU build has no GPU memory",
    "--enable-expert-parallel": "expert parallelism spreads experts across GPUs",
}
ONE_ONLY = {
    "--tensor-parallel-size": "a cpu-real node runs one engine process without tensor parallelism",
    "--pipeline-parallel-size": "a cpu-real node runs one engine process without pipeline parallelism",
    "--data-parallel-size": "a cpu-real node runs one engine process without data parallelism",
    "--nnodes": "a cpu-real engine runs on one node",
}
# Every spelling of a flag (aliases included, from vLLM's own parser) to its first spelling.
CANONICAL = {spelling: option["flags"][0] for option in PARSER["options"] for spelling in option["flags"]}


def pairs(argv: list[str]) -> Iterator[tuple[str, str | None]]:
    """(canonical flag, value or None) for each option of vLLM's parser in an argument list."""
    for i, word in enumerate(argv):
        if not word.startswith("-"):
            continue
        name, eq, value = word.partition("=")
        if name in CANONICAL:
            following = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("-") else None
            yield CANONICAL[name], value if eq else following


def refusal(argv: Iterable[str], where: str = "cpu-real nodes") -> str | None:
    """Why the CPU build cannot run this vLLM command line (the first flag it cannot honour), or None."""
    for flag, value in pairs(list(argv)):
        if flag in GPU_ONLY:
            return f"{flag} is refused on {where}: {GPU_ONLY[flag]}"
        if flag in ONE_ONLY and value not in (None, "1"):
            return f"{flag} {value} is refused on {where}: {ONE_ONLY[flag]}"
    return None
