"""Make a freshly started web process ready to serve without pauses: load every view, then freeze
what is loaded out of the garbage collector's reach.

A full (oldest-generation) collection walks every container object the process holds; in a Django
process that is about 100,000 of them at start-up, and walking them took as long as a whole list
request (bench/api_list.py measures it per request). Objects alive at start-up live for the whole
process, so `gc.freeze()` moves them to a generation the collector never scans, and the collections
that requests trigger only walk what requests allocate.
"""

from __future__ import annotations

import gc


def warm_up() -> None:
    """Import the URLconf (views, serializers, filters) and freeze the objects alive now."""
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 - imports every view module now, not on the first request
    gc.collect()  # garbage from imports goes now, so it is not frozen forever
    gc.freeze()
