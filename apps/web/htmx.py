"""The one predicate for "render the fragment, not the page"."""


def is_fragment(request) -> bool:
    """True for htmx requests that want a partial: polling and swaps, not boosted full-page navigation."""
    htmx = getattr(request, "htmx", None)
    return bool(htmx) and not htmx.boosted
