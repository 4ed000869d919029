"""The one filter backend of every list endpoint: django-filter, strict about the query string.

A query parameter that is neither a declared filter nor a pagination, ordering, search or format
parameter answers 400 naming it: a misspelt filter must never quietly return the unfiltered list (a
script taking `results[0]` would act on the wrong object). A malformed filter value is a 400 as well
(django-filter's validation; booleans accept only true/false, see StrictBooleanFilter; ids only ASCII digits,
see AsciiIdFilter), and a search term
with a NUL character (which PostgreSQL text cannot hold) too. drf-spectacular documents the declared
filters from the FilterSet.
"""

from __future__ import annotations

import django_filters
from django import forms
from django.db import models
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import filters, serializers
from rest_framework.exceptions import ValidationError
from rest_framework.settings import api_settings

from apps.core.ids import ascii_int


class SearchFilter(filters.SearchFilter):
    """`?search=`: a NUL character cannot occur in PostgreSQL text, so it is a 400, not a database error."""

    def get_search_terms(self, request):
        value = request.query_params.get(self.search_param, "")
        if "\x00" in value:
            raise ValidationError({self.search_param: ["Null characters are not allowed."]})
        return super().get_search_terms(request)


class OrderingFilter(filters.OrderingFilter):
    """`?ordering=`: a field the view does not offer is a 400 naming the parameter, like any unknown
    parameter, rather than quietly dropped (`?ordering=password` must not look like it worked)."""

    def remove_invalid_fields(self, queryset, fields, view, request):
        valid = {item[0] for item in self.get_valid_fields(queryset, view, {"request": request})}
        unknown = [term for term in fields if term.lstrip("-") not in valid]
        if unknown:
            choices = ", ".join(sorted(valid))
            message = f"Cannot order by {', '.join(unknown)}; choose from {choices}."
            raise ValidationError({self.ordering_param: [message]})
        return super().remove_invalid_fields(queryset, fields, view, request)


class _StrictBooleanField(forms.NullBooleanField):
    """true/false (and 1/0); an empty value means no filter; anything else is an error."""

    widget = forms.TextInput

    def to_python(self, value):
        if value in (None, ""):
            return None
        lowered = str(value).strip().lower()
        if lowered in ("true", "1"):
            return True
        if lowered in ("false", "0"):
            return False
        raise forms.ValidationError("Use true or false.", code="invalid")

    def validate(self, value):
        pass


class StrictBooleanFilter(django_filters.BooleanFilter):
    field_class = _StrictBooleanField


NOT_ASCII_ID = "Write the id in digits 0-9."


class _AsciiIdField(django_filters.fields.ModelChoiceField):
    """An object named by its id in ASCII digits (`apps.core.ids`): `?service=١` is an error, not object 1."""

    def to_python(self, value):
        by_pk = self.to_field_name in (None, self.queryset.model._meta.pk.name)
        if value not in self.empty_values and by_pk and ascii_int(value) is None:
            raise forms.ValidationError(NOT_ASCII_ID, code="invalid_choice")
        return super().to_python(value)


class AsciiIdFilter(django_filters.ModelChoiceFilter):
    field_class = _AsciiIdField


class _IdNumberField(forms.IntegerField):
    def to_python(self, value):
        if value not in self.empty_values and ascii_int(value) is None:
            raise forms.ValidationError(NOT_ASCII_ID, code="invalid")
        return super().to_python(value)


class IdFilter(django_filters.NumberFilter):
    """A filter on an id column (`model_id`) in ASCII digits; NumberFilter's Decimal reads `١` as 1."""

    field_class = _IdNumberField


def _related(kind) -> dict:
    return {**django_filters.FilterSet.FILTER_DEFAULTS[kind], "filter_class": AsciiIdFilter}


class StrictFilterSet(django_filters.FilterSet):
    """The base of every filter set: boolean fields filter with StrictBooleanFilter, related objects by ASCII ids."""

    FILTER_DEFAULTS = {
        **django_filters.FilterSet.FILTER_DEFAULTS,
        models.BooleanField: {"filter_class": StrictBooleanFilter},
        models.ForeignKey: _related(models.ForeignKey),
        models.OneToOneField: _related(models.OneToOneField),
    }


class StrictFilterBackend(DjangoFilterBackend):
    """DjangoFilterBackend that refuses unknown query parameters on list requests; filter sets made from
    `filterset_fields` are StrictFilterSets."""

    filterset_base = StrictFilterSet

    def filter_queryset(self, request, queryset, view):
        if _is_list(view):
            unknown = sorted(set(request.query_params) - allowed_query_params(request, queryset, view))
            if unknown:
                raise serializers.ValidationError(
                    {name: ["Unknown query parameter; see the API schema for this list's filters."]
                     for name in unknown}
                )
        filterset_class = self.get_filterset_class(view, queryset)
        if filterset_class is not None and not set(request.query_params).intersection(filterset_class.base_filters):
            # No filter is named, so the filter set would return the queryset as it is, after building a form
            # and a deep copy of every filter (about a tenth of a 100-item service page's CPU time).
            return queryset
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
