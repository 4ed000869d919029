"""Placeholder for the sleep-mode figures (`figures()`): nothing is measured here yet, so every figure is None.

bench/cold_start.py reads the sleep figures from `figures()`; this module only lets it run until the sleep
measurements exist, and says so by returning None for each.
"""

from __future__ import annotations


def figures() -> dict:
    """The sleep figures' shape, every value None (not measured)."""
    return {
        "activation_s": {"llama-8b-l4": None, "llama-70b-4xh100": None},
        "gpu_hours": {"sleep": None, "delete": None},
        "activation_p95_s": {"sleep": None, "delete": None},
    }


if __name__ == "__main__":
    import json

    print(json.dumps(figures()))
