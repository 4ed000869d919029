"""mkdocs hook: the API page's OpenAPI document, generated from the code at every build.

`manage.py spectacular` writes the schema the running service serves at /api/schema/; the hook publishes it
as `api/openapi.yaml` beside the pages and replaces the marker `<!-- openapi-endpoints -->` on `api.md` with a
table of its paths, methods and summaries. Nothing is committed, so the document cannot go stale.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- openapi-endpoints -->"
SCHEMA_URI = "api/openapi.yaml"
METHODS = ("get", "post", "put", "patch", "delete")

_schema_text: str | None = None


def _generate() -> str:
    """The schema as `manage.py spectacular --validate --fail-on-warn` writes it; the database is never opened,
    so a placeholder URL stands in and the local settings (DEBUG) need no secrets."""
    env = {k: v for k, v in os.environ.items()
           if k not in {"DATABASE_URL_FILE", "SECRET_KEY", "SECRET_KEY_FILE"}}
    env.update(DATABASE_URL="postgres://docs@127.0.0.1:9/schema-only", DEBUG="true")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "openapi.yaml"
        subprocess.run(
            [sys.executable, "manage.py", "spectacular", "--validate", "--fail-on-warn", "--file", str(out)],
            cwd=ROOT, env=env, check=True, capture_output=True, text=True,
        )
        return out.read_text()


def on_files(files, config):
    global _schema_text
    _schema_text = _generate()
    files.append(File.generated(config, SCHEMA_URI, content=_schema_text))
    return files


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def endpoint_table(schema_text: str) -> str:
    """A markdown table: one row per path and method, with the operation's summary or first line."""
    schema = yaml.safe_load(schema_text)
    rows = ["| method | path | what it does |", "|---|---|---|"]
    for path, item in schema.get("paths", {}).items():
        for method in METHODS:
            op = item.get(method)
            if op is None:
                continue
            what = op.get("summary") or (op.get("description") or "").strip().split("\n")[0]
            rows.append(f"| `{method.upper()}` | `{_cell(path)}` | {_cell(what)} |")
    return "\n".join(rows)


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri != "api.md":
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"api.md lost its marker {MARKER}")
    return markdown.replace(MARKER, endpoint_table(_schema_text))
