"""The README stays a short front page: at most 200 lines, and every relative link in it leads to a file of the
repository (the reference lives in docs/, built with `mkdocs build --strict` by `make test`)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_LINES = 200

# Inline links and images, `[text](target)` / `![alt](target "title")`, and reference definitions `[id]: target`.
INLINE = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\".*\")?\s*$", re.MULTILINE)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def relative_targets(markdown: str) -> list[str]:
    """The link targets that point into the repository: no scheme (http:, mailto:), not a bare #anchor, and
    without their #fragment. Code spans and fenced blocks are not links."""
    text = re.sub(r"```.*?```", "", markdown, flags=re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    targets = INLINE.findall(text) + REFERENCE.findall(text)
    return [t.split("#", 1)[0] for t in targets if not SCHEME.match(t) and not t.startswith("#")]


def missing_targets(markdown: str, base: Path) -> list[str]:
    return [t for t in relative_targets(markdown) if not (base / t).is_file()]


def test_the_readme_has_at_most_200_lines():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; move reference into docs/"


def test_every_relative_link_in_the_readme_leads_to_a_file():
    markdown = README.read_text(encoding="utf-8")
    assert relative_targets(markdown), "the README links into docs/"
    assert missing_targets(markdown, ROOT) == []


def test_the_link_check_finds_what_it_should(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "here.md").write_text("# Here\n")
    (tmp_path / "shot.png").write_bytes(b"")
    sample = "\n".join([
        "[here](docs/here.md#a-heading) ![shot](shot.png) [gone](docs/gone.md)",
        '[titled](docs/missing.md "a title") [web](https://example.org/x.md) [mail](mailto:a@example.org)',
        "[anchor](#top) [folder](docs/) `[not a link](docs/code.md)`",
        "```",
        "[fenced](docs/fenced.md)",
        "```",
        "[ref]: docs/ref-missing.md",
    ])
    assert relative_targets(sample) == [
        "docs/here.md", "shot.png", "docs/gone.md", "docs/missing.md", "docs/", "docs/ref-missing.md"]
    # A folder is not a file: a link must name the page.
    assert missing_targets(sample, tmp_path) == ["docs/gone.md", "docs/missing.md", "docs/", "docs/ref-missing.md"]
