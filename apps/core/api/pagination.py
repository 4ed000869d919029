"""Page-number pagination with a client-chosen page size (`?page_size=`), capped."""

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination


class StandardPagination(PageNumberPagination):
    page_size_query_param = "page_size"
    max_page_size = 500

    def get_page_size(self, request):
        """`page_size` between 1 and 500 (larger is capped); anything else is a 400, not silently ignored."""
        raw = request.query_params.get(self.page_size_query_param)
        if raw and not (raw.isascii() and raw.isdigit() and int(raw) >= 1):
            raise ValidationError({self.page_size_query_param: [f"A whole number from 1 to {self.max_page_size}."]})
        return super().get_page_size(request)
