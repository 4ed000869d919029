"""Checks the portal's browser tests run on every page they visit: sideways scrolling and axe-core."""

from __future__ import annotations

from urllib.parse import urljoin

from django.conf import settings


def page_width(page) -> tuple[int, list[str]]:
    """The document's scroll width and up to five elements (outside a `.scroll` box) reaching past 391 px."""
    width = page.evaluate("document.documentElement.scrollWidth")
    wide = page.evaluate("""() => [...document.querySelectorAll('body *')]
        .filter(e => e.getBoundingClientRect().right > 391 && !e.closest('.scroll'))
        .slice(0, 5).map(e => e.tagName + '#' + e.id + '.' + e.className)""")
    return width, wide


def serious_axe_violations(page, within: str | None = None) -> list[str]:
    """axe-core's serious and critical violations on the loaded page (or in the element matching `within`),
    each with up to three targets."""
    # From our static files, not inline: the Content-Security-Policy refuses inline scripts, tests' included.
    page.add_script_tag(url=urljoin(page.url, settings.STATIC_URL + "vendor/axe.min.js"))
    violations = page.evaluate("async (within) => (await axe.run(within || document, "
                               "{resultTypes: ['violations']})).violations", within)
    return [f"{v['id']}: {[n['target'] for n in v['nodes']][:3]}" for v in violations
            if v["impact"] in ("serious", "critical")]
