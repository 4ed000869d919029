"""Filters shared by every list endpoint: DRF's search refusing terms PostgreSQL cannot compare, and a
boolean filter that refuses values other than true/false instead of ignoring them."""

from __future__ import annotations

import django_filters
from django import forms
from django.db import models
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import filters
from rest_framework.exceptions import ValidationError


class SearchFilter(filters.SearchFilter):
    """`?search=`: a NUL character cannot occur in PostgreSQL text, so it is a 400, not a database error."""

    def get_search_terms(self, request):
        value = request.query_params.get(self.search_param, "")
        if "\x00" in value:
            raise ValidationError({self.search_param: ["Null characters are not allowed."]})
        return super().get_search_terms(request)


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


class StrictFilterSet(django_filters.FilterSet):
    """The base of every filter set: boolean fields filter with StrictBooleanFilter."""

    FILTER_DEFAULTS = {
        **django_filters.FilterSet.FILTER_DEFAULTS,
        models.BooleanField: {"filter_class": StrictBooleanFilter},
    }


class FilterBackend(DjangoFilterBackend):
    """django-filter's backend; filter sets made from `filterset_fields` are StrictFilterSets too."""

    filterset_base = StrictFilterSet
