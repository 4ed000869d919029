"""Filter backends shared by every list endpoint: DRF's search, refusing terms PostgreSQL cannot compare."""

from __future__ import annotations

from rest_framework import filters
from rest_framework.exceptions import ValidationError


class SearchFilter(filters.SearchFilter):
    """`?search=`: a NUL character cannot occur in PostgreSQL text, so it is a 400, not a database error."""

    def get_search_terms(self, request):
        value = request.query_params.get(self.search_param, "")
        if "\x00" in value:
            raise ValidationError({self.search_param: ["Null characters are not allowed."]})
        return super().get_search_terms(request)
