"""Make a web process serve without garbage-collector pauses inside requests.

Where a list request's tail came from (bench/api_list.py prints it per request): collections of the
oldest generation. A page of services leaves cyclic garbage behind (serializer fields point at their
parent serializer, prefetched pools at their service), which reference counting cannot free; it ages
into the oldest generation, and a full collection walks it and every object alive since start-up,
in the middle of whichever request happens to allocate next. So, in the web entry points:

- objects alive after start-up (about 100,000, alive for the whole process) are frozen out of the
  collector's reach (`gc.freeze()`);
- young generations are collected after each response is sent, when nobody waits for it, and
  the automatic thresholds are raised so that a request rarely triggers a collection itself (they
  stay as the safety net for a request that allocates a great deal).
"""

from __future__ import annotations

import gc

# Allocations before an automatic young collection, and how rarely the older ones follow. CPython's
# defaults are (700, 10, 10); a 100-item page allocates tens of thousands of objects.
THRESHOLDS = (50_000, 20, 100)


def collect_after_response(**_kwargs) -> None:
    """`request_finished` receiver: free the request's cyclic garbage now, between requests."""
    gc.collect(1)


def warm_up() -> None:
    """Import the URLconf (views, serializers, filters), freeze the objects alive now, and move
    collections between requests."""
    from django.core.signals import request_finished
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 - imports every view module now, not on the first request
    gc.collect()  # garbage from imports goes now, so it is not frozen forever
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    request_finished.connect(collect_after_response, dispatch_uid="controlplane.warmup")
