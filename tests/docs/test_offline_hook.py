"""The docs build's offline hook (docs/_hooks/offline.py): `make test`'s strict build fails on a page that loads a
script, stylesheet or image from another host, or holds a mermaid block (which the theme draws with mermaid
fetched from unpkg), so a copy of the site published without internet shows every page whole."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml
from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "docs" / "_hooks" / "offline.py"


def load_hook():
    spec = importlib.util.spec_from_file_location("docs_offline_hook", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The head and body of a page as the theme writes them: every load is relative to the site.
LOCAL_PAGE = """<!doctype html><html><head>
<link rel="canonical" href="https://example.org/concepts/">
<link rel="icon" href="../assets/images/favicon.png">
<link rel="stylesheet" href="../assets/stylesheets/main.css">
</head><body>
<a href="https://squidfunk.github.io/mkdocs-material/">Material for MkDocs</a>
<p><img alt="The control and data paths" src="../images/control-and-data-paths.svg"></p>
<pre><code class="language-mermaid">flowchart TB</code></pre>
<script src="../assets/javascripts/bundle.js"></script>
</body></html>"""


def test_a_page_that_loads_only_from_the_site_passes():
    assert load_hook().external_loads(LOCAL_PAGE) == []


@pytest.mark.parametrize("tag, expected", [
    ('<script src="https://unpkg.com/mermaid@11/dist/mermaid.min.js"></script>',
     '<script src="https://unpkg.com/mermaid@11/dist/mermaid.min.js">'),
    ('<script src="//cdn.example.net/a.js"></script>', '<script src="//cdn.example.net/a.js">'),
    ('<link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Roboto">',
     '<link href="https://fonts.googleapis.com/css?family=Roboto">'),
    ('<link rel="Preload" href="HTTP://cdn.example.net/font.woff2">',
     '<link href="HTTP://cdn.example.net/font.woff2">'),
    ('<img src="http://example.org/diagram.png" alt="">', '<img src="http://example.org/diagram.png">'),
    ('<iframe src="https://example.org/embed"></iframe>', '<iframe src="https://example.org/embed">'),
])
def test_each_load_from_another_host_is_named(tag, expected):
    page = LOCAL_PAGE.replace("</body>", tag + "</body>")
    assert load_hook().external_loads(page) == [expected]


def test_a_mermaid_block_is_refused_since_the_theme_fetches_mermaid_from_a_cdn():
    page = LOCAL_PAGE.replace("</body>", '<pre class="mermaid"><code>flowchart TB</code></pre></body>')
    [found] = load_hook().external_loads(page)
    assert found.startswith('a mermaid block (<pre class="mermaid">)')


def test_the_build_fails_naming_each_page_and_load(tmp_path):
    hook = load_hook()
    (tmp_path / "concepts").mkdir()
    (tmp_path / "index.html").write_text(LOCAL_PAGE)
    (tmp_path / "concepts" / "index.html").write_text(
        LOCAL_PAGE.replace("</body>", '<script src="https://unpkg.com/m.js"></script></body>'))
    with pytest.raises(PluginError) as raised:
        hook.on_post_build({"site_dir": str(tmp_path)})
    assert str(raised.value).splitlines()[1:] == ['  concepts/index.html: <script src="https://unpkg.com/m.js">']

    (tmp_path / "concepts" / "index.html").write_text(LOCAL_PAGE)
    hook.on_post_build({"site_dir": str(tmp_path)})


def test_the_site_build_runs_the_hook_and_defines_no_mermaid_fence():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    assert "docs/_hooks/offline.py" in config["hooks"]
    assert "mermaid" not in str(config["markdown_extensions"])
    assert "```mermaid" not in "".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
