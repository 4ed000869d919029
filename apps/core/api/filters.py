"""The one filter backend of every list endpoint: django-filter, strict about the query string.

A query parameter that is neither a declared filter nor a pagination, ordering, search or format
parameter answers 400 naming it: a misspelt filter must never quietly return the unfiltered list (a
script taking `results[0]` would act on the wrong object). A malformed filter value is a 400 as well
(django-filter's validation). drf-spectacular documents the declared filters from the FilterSet.
"""

from __future__ import annotations

from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import serializers
from rest_framework.settings import api_settings


class StrictFilterBackend(DjangoFilterBackend):
    """DjangoFilterBackend that refuses unknown query parameters on list requests."""

    def filter_queryset(self, request, queryset, view):
        if _is_list(view):
            unknown = sorted(set(request.query_params) - allowed_query_params(request, queryset, view))
            if unknown:
                raise serializers.ValidationError(
                    {name: ["Unknown query parameter; see the API schema for this list's filters."]
                     for name in unknown}
                )
        return super().filter_queryset(request, queryset, view)


def _is_list(view) -> bool:
    """A collection request, not one object (whose lookup DRF also runs through the filter backends)."""
    lookup = getattr(view, "lookup_url_kwarg", None) or getattr(view, "lookup_field", "pk")
    return lookup not in getattr(view, "kwargs", {})


def allowed_query_params(request, queryset, view) -> set[str]:
    """Declared filters plus what the view's pagination, ordering and search backends and DRF read."""
    allowed = {api_settings.URL_FORMAT_OVERRIDE, api_settings.ORDERING_PARAM, api_settings.SEARCH_PARAM}
    allowed.update(getattr(view, "extra_query_params", ()))
    filterset_class = DjangoFilterBackend().get_filterset_class(view, queryset)
    if filterset_class is not None:
        allowed.update(filterset_class.base_filters)
    paginator = getattr(view, "paginator", None)
    for attribute in ("page_query_param", "page_size_query_param", "limit_query_param", "offset_query_param",
                      "cursor_query_param"):
        name = getattr(paginator, attribute, None)
        if name:
            allowed.add(name)
    return {name for name in allowed if name}
