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


def tab_to(page, selector: str, limit: int = 80) -> None:
    """Press Tab until the element matching `selector` has the focus (keyboard only, as a user would)."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("(s) => document.activeElement && document.activeElement.matches(s)", selector):
            return
    raise AssertionError(f"{selector} never received focus by Tab")


def serious_axe_violations(page, within: str | None = None) -> list[str]:
    """axe-core's serious and critical violations on the loaded page (or in the element matching `within`),
    each with up to three targets."""
    # From our static files, not inline: the Content-Security-Policy refuses inline scripts, tests' included.
    page.add_script_tag(url=urljoin(page.url, settings.STATIC_URL + "vendor/axe.min.js"))
    violations = page.evaluate("async (within) => (await axe.run(within || document, "
                               "{resultTypes: ['violations']})).violations", within)
    return [f"{v['id']}: {[n['target'] for n in v['nodes']][:3]}" for v in violations
            if v["impact"] in ("serious", "critical")]


def start_service_form(page, base_url: str, name: str) -> None:
    """Open the portal's new-service form for tenant alpha and fill what every case needs: the name, and the
    catalog's shared model and runtime (tests/web/portal/conftest.py `catalog_a`)."""
    from django.urls import reverse

    page.goto(base_url + reverse("web:service-create", args=["alpha"]))
    page.locator("#id_name").fill(name)
    page.get_by_label("Model", exact=True).select_option(label="llama-shared")
    page.get_by_label("Runtime", exact=True).select_option(label="vllm-shared")
