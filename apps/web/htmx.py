"""The one predicate for "render the fragment, not the page", and the render that follows it."""

from django.shortcuts import render


def is_fragment(request) -> bool:
    """True for htmx requests that want a partial: polling and swaps, not boosted full-page navigation."""
    htmx = getattr(request, "htmx", None)
    return bool(htmx) and not htmx.boosted


def render_page(request, page: str, partial: str, context: dict, status: int = 200):
    """The `partial` template for a fragment request, else the full `page`."""
    return render(request, partial if is_fragment(request) else page, context, status=status)
