"""Pagination of every list endpoint: page numbers (`?page=`) or keyset cursors (`?cursor=`), with a
client-chosen page size (`?page_size=`), capped.

A page number costs an OFFSET scan that grows with the depth plus a COUNT of the whole list. A cursor
names the last row of the previous page by its ordering values (the primary key breaks ties), so every
page is one index range read of `page_size` rows and no count, at any depth. Start with `?cursor=`
(empty) and follow `next`; a cursor is bound to the ordering it was made for.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import OrderedDict
from types import SimpleNamespace

from django.core.exceptions import FieldDoesNotExist
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Q
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

from apps.core.ids import ascii_int


class StandardPagination(PageNumberPagination):
    """`?page=N` (with `count`) or `?cursor=` (keyset, no `count`); see the module docstring."""

    page_size_query_param = "page_size"
    max_page_size = 500
    cursor_query_param = "cursor"
    cursor_query_description = (
        "Keyset pagination: pass an empty value for the first page, then the `next` link's cursor. "
        "Every page costs the same at any depth; the response has no `count`."
    )

    def get_page_size(self, request):
        """`page_size` between 1 and 500 (larger is capped); anything else is a 400, not silently ignored."""
        raw = request.query_params.get(self.page_size_query_param)
        if raw and not (ascii_int(raw) or 0) >= 1:
            raise ValidationError({self.page_size_query_param: [f"A whole number from 1 to {self.max_page_size}."]})
        return super().get_page_size(request)

    def get_page_number(self, request, paginator):
        """`?page=` in ASCII digits (or `last`): Django's paginator would read `١` as page 1."""
        number = super().get_page_number(request, paginator)
        if number in self.last_page_strings or ascii_int(number) is not None:
            return number
        raise NotFound("Invalid page: write the page number in digits 0-9.")

    def paginate_queryset(self, queryset, request, view=None):
        self.cursor_mode = self.cursor_query_param in request.query_params
        if not self.cursor_mode:
            return super().paginate_queryset(queryset, request, view)
        self.request = request
        self.display_page_controls = False
        size = self.get_page_size(request)
        ordering = _ordering(queryset)
        fields = [_field(queryset.model, name) for name in ordering]
        position = _decode(request.query_params[self.cursor_query_param], ordering, fields)
        page = queryset.order_by(*ordering)
        if position is not None:
            page = page.filter(_after(ordering, position))
        rows = list(page[: size + 1])
        self.next_position = None
        if len(rows) > size:
            rows = rows[:size]
            self.next_position = [_value(rows[-1], name, field) for name, field in zip(ordering, fields, strict=True)]
        self.ordering = ordering
        return rows

    def get_paginated_response(self, data):
        if not self.cursor_mode:
            return super().get_paginated_response(data)
        return Response(OrderedDict([("next", self.get_next_link()), ("previous", None), ("results", data)]))

    def get_next_link(self):
        if not self.cursor_mode:
            return super().get_next_link()
        if self.next_position is None:
            return None
        url = remove_query_param(self.request.build_absolute_uri(), self.page_query_param)
        return replace_query_param(url, self.cursor_query_param, _encode(self.ordering, self.next_position))

    def get_previous_link(self):
        if getattr(self, "cursor_mode", False):
            return None  # cursors go forward only, like a Kubernetes `continue` token
        return super().get_previous_link()

    def get_paginated_response_schema(self, schema):
        described = super().get_paginated_response_schema(schema)
        described["required"] = ["results"]  # `count` is absent from cursor pages
        described["properties"]["count"]["description"] = "Total number of items (page-number pages only)."
        return described

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        parameters.append({
            "name": self.cursor_query_param, "required": False, "in": "query",
            "description": self.cursor_query_description, "schema": {"type": "string"},
            "allowEmptyValue": True,  # an empty cursor asks for the first page
        })
        return parameters


def _ordering(queryset) -> list[str]:
    """The queryset's ordering as field names with the primary key appended as the tie-breaker."""
    names = list(queryset.query.order_by or queryset.model._meta.ordering or [])
    for name in names:
        if not isinstance(name, str):
            raise ValidationError({"cursor": "This list's ordering cannot be paged by cursor; use `page`."})
    if not any(n.lstrip("-") in ("pk", queryset.model._meta.pk.attname) for n in names):
        names.append("pk")
    return names


def _field(model, name: str):
    """The model field behind an ordering name (`-created`, `tenant_id`, `pk`); nullable ones are refused
    because NULLs have no place in a strict row order."""
    attname = name.lstrip("-")
    if attname == "pk":
        return model._meta.pk
    try:
        field = model._meta.get_field(attname)
    except FieldDoesNotExist:
        field = next((f for f in model._meta.concrete_fields if f.attname == attname), None)
    if field is None or "__" in attname:
        raise ValidationError({"cursor": f"Ordering by {attname} cannot be paged by cursor; use `page`."})
    if field.null:
        raise ValidationError({"cursor": f"Ordering by {attname} (which may be empty) cannot be paged by cursor; "
                                         "use `page`."})
    return field


def _value(obj, name: str, field):
    """The cursor value of one ordering column of a row: a model instance, or a `values()` row that holds
    the ordering columns by attname (and the primary key as `pk`)."""
    if isinstance(obj, dict):
        obj = SimpleNamespace(**obj)
    if name.lstrip("-") == "pk":
        return obj.pk
    return field.value_to_string(obj) if not field.is_relation else getattr(obj, field.attname)


def _encode(ordering: list[str], position: list) -> str:
    raw = json.dumps({"o": ordering, "p": position}, separators=(",", ":"), default=str)
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode(cursor: str, ordering: list[str], fields: list) -> list | None:
    """The position a cursor names, converted back to field values; None for the first page."""
    if not cursor:
        return None
    try:
        raw = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        saved, position = raw["o"], raw["p"]
    except (binascii.Error, ValueError, TypeError, KeyError):
        raise ValidationError({"cursor": "Invalid cursor; start again with an empty `cursor`."}) from None
    if saved != ordering or not isinstance(position, list) or len(position) != len(fields):
        raise ValidationError({"cursor": "This cursor was made for another ordering; start again with an "
                                         "empty `cursor`."})
    try:
        values = []
        for field, raw_value in zip(fields, position, strict=True):
            target = field.target_field if field.is_relation else field
            value = target.to_python(raw_value)
            target.run_validators(value)  # e.g. an integer beyond the column's range
            values.append(value)
        return values
    except DjangoValidationError:
        raise ValidationError({"cursor": "Invalid cursor; start again with an empty `cursor`."}) from None


def _after(ordering: list[str], position: list) -> Q:
    """Rows strictly after `position` in `ordering`: (a > x) or (a = x and b > y) or ... . The leading
    `a >= x` is said on its own as well so that PostgreSQL starts its index range scan at the position."""
    later = Q()
    equal = Q()
    for name, value in zip(ordering, position, strict=True):
        attname = name.lstrip("-")
        op = "lt" if name.startswith("-") else "gt"
        later |= equal & Q(**{f"{attname}__{op}": value})
        equal &= Q(**{attname: value})
    first = ordering[0]
    bound = Q(**{f"{first.lstrip('-')}__{'lte' if first.startswith('-') else 'gte'}": position[0]})
    return bound & later
