"""What a page shows of its own template source: Django tag, variable or comment markers left in the text a
person reads (a multi-line `{# #}` is not a comment in Django and prints as text)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

MARKERS = ("{#", "#}", "{%", "{{")
# Attributes a person sees or hears read out.
SHOWN_ATTRIBUTES = ("aria-label", "title", "placeholder", "alt")
HIDDEN_ELEMENTS = ("script", "style", "template")


class _ShownText(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag, attrs):
        if tag in HIDDEN_ELEMENTS:
            self.hidden += 1
        self.parts.extend(value for name, value in attrs if name in SHOWN_ATTRIBUTES and value)

    def handle_endtag(self, tag):
        if tag in HIDDEN_ELEMENTS and self.hidden:
            self.hidden -= 1

    def handle_data(self, data):
        if not self.hidden:
            self.parts.append(data)


def shown_text(html: str) -> str:
    """The text of an HTML document or fragment outside scripts and styles, with the shown attributes."""
    parser = _ShownText()
    parser.feed(html)
    parser.close()
    return "\n".join(parser.parts)


def template_source(text: str) -> list[str]:
    """Up to five snippets of `text` around a template marker (empty when there is none)."""
    pattern = "|".join(re.escape(marker) for marker in MARKERS)
    return [text[max(0, m.start() - 40):m.end() + 40] for m in re.finditer(pattern, text)][:5]
