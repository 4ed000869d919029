"""The docs build's OpenAPI hook (docs/_hooks/openapi.py): its endpoint table, worked by hand on a small schema."""

from __future__ import annotations

import importlib.util
from pathlib import Path

HOOK = Path(__file__).resolve().parents[2] / "docs" / "_hooks" / "openapi.py"


def load_hook():
    spec = importlib.util.spec_from_file_location("docs_openapi_hook", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCHEMA = """
openapi: 3.0.3
paths:
  /api/v1/services/:
    get:
      summary: List services
    post:
      description: |
        Create a service.
        The spec is validated as the portal validates it.
  /api/v1/services/{id}/scale/:
    parameters: []
    post:
      summary: Scale | one pool
"""


def test_the_endpoint_table_has_one_row_per_path_and_method():
    table = load_hook().endpoint_table(SCHEMA)
    assert table.splitlines() == [
        "| method | path | what it does |",
        "|---|---|---|",
        "| `GET` | `/api/v1/services/` | List services |",
        "| `POST` | `/api/v1/services/` | Create a service. |",
        "| `POST` | `/api/v1/services/{id}/scale/` | Scale \\| one pool |",
    ]
