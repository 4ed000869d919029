"""mkdocs hook: the built site loads nothing from another host, so a copy published without internet works whole.

After every build each HTML page is read, and the build fails, naming the page and the address, on:
- a script, stylesheet, preload, image, frame, media source or object whose address names a host (`http:`,
  `https:` or `//`); links a reader follows (`<a href>`) are not loads and may go anywhere;
- a mermaid block (an element of class `mermaid`): the theme fetches mermaid from a CDN (unpkg) when such a page
  opens, so offline the page shows the diagram's source. Diagrams are SVG files in docs/images/ instead.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

from mkdocs.exceptions import PluginError

# The attribute through which each tag makes the browser fetch something as the page loads.
LOADS = {"script": "src", "img": "src", "iframe": "src", "source": "src", "audio": "src", "video": "src",
         "embed": "src", "object": "data", "link": "href"}
# A <link> loads its href only for these relations (a stylesheet, an icon, a preload); others are metadata.
LINK_LOADS = {"stylesheet", "icon", "preload", "modulepreload", "prefetch", "manifest", "apple-touch-icon"}


def _names_a_host(address: str) -> bool:
    address = address.strip().lower()
    return address.startswith(("http:", "https:", "//"))


class _Scan(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if "mermaid" in values.get("class", "").split():
            self.found.append(f"a mermaid block (<{tag} class=\"mermaid\">), which the theme draws with a script "
                              "fetched from a CDN")
        attribute = LOADS.get(tag)
        if attribute is None or not _names_a_host(values.get(attribute, "")):
            return
        if tag == "link" and not LINK_LOADS & set(values.get("rel", "").lower().split()):
            return
        self.found.append(f"<{tag} {attribute}=\"{values[attribute]}\">")


def external_loads(html: str) -> list[str]:
    """What the page `html` would fetch from another host, or a mermaid block; empty when it works offline."""
    scan = _Scan()
    scan.feed(html)
    scan.close()
    return scan.found


def on_post_build(config, **kwargs) -> None:
    site = Path(config["site_dir"])
    faults = [f"{page.relative_to(site)}: {found}"
              for page in sorted(site.rglob("*.html"))
              for found in external_loads(page.read_text(encoding="utf-8"))]
    if faults:
        raise PluginError("The site must work without internet; these pages load from another host:\n  "
                          + "\n  ".join(faults))
