"""The base serializer: model validation (`full_clean()`) and write permission on the final state.

Uniqueness is left to the model (its `clean()` names the field) so a clash becomes a 409, and
related-object choices are narrowed to what the requesting user may see, so a reference to another
tenant's object is rejected exactly like one that does not exist.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied
from rest_framework.validators import UniqueTogetherValidator, UniqueValidator

from apps.core.access import CHANGE, allowed, refusal
from apps.core.api.exceptions import api_error


def _has_nul(value) -> bool:
    """Whether any string in value (keys included) holds U+0000.

    Walked with an explicit stack, not recursion: a body nested a few hundred levels deep is still
    within the JSON parser's limit but past Python's recursion limit, and must be a 400, not a 500.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


class AsciiPrimaryKeyRelatedField(serializers.PrimaryKeyRelatedField):
    """A primary key as an integer or a string of ASCII digits: int() reads any Unicode digit, and
    `"1١"` must not resolve to object 11."""

    default_error_messages = {
        **serializers.PrimaryKeyRelatedField.default_error_messages,
        "not_ascii": "A primary key is written in ASCII digits (0-9) only.",
    }

    def to_internal_value(self, data):
        if isinstance(data, str) and not (data.isascii() and data.isdigit()):
            self.fail("not_ascii")
        return super().to_internal_value(data)


class RefusesNul:
    """A serializer mixin refusing U+0000 anywhere in the body (PostgreSQL text and jsonb cannot hold it, and a
    related field would look it up as a slug) before any field is read: a 400 naming the fields."""

    def to_internal_value(self, data):
        items = data.lists() if hasattr(data, "lists") else data.items() if isinstance(data, dict) else ()
        nul = sorted(str(name) for name, value in items if _has_nul(name) or _has_nul(value))
        if nul:
            raise serializers.ValidationError({key: ["Null characters (U+0000) are not allowed."] for key in nul})
        return super().to_internal_value(data)


class ValidatedModelSerializer(RefusesNul, serializers.ModelSerializer):
    serializer_related_field = AsciiPrimaryKeyRelatedField
    # Related fields whose choices are not narrowed to the user (e.g. clusters, chosen by name).
    unscoped_related_fields: tuple[str, ...] = ()
    # Fields that may be set on create but not changed afterwards.
    create_only_fields: tuple[str, ...] = ()

    def build_standard_field(self, field_name, model_field):
        field_class, kwargs = super().build_standard_field(field_name, model_field)
        if "validators" in kwargs:
            kwargs["validators"] = [v for v in kwargs["validators"] if not isinstance(v, UniqueValidator)]
        return field_class, kwargs

    def get_validators(self):
        return [v for v in super().get_validators() if not isinstance(v, UniqueTogetherValidator)]

    def get_fields(self):
        fields = super().get_fields()
        request = self.context.get("request")
        user = getattr(request, "user", None)
        for name, field in fields.items():
            relation = getattr(field, "child_relation", field)
            queryset = getattr(relation, "queryset", None)
            if name in self.unscoped_related_fields or queryset is None or user is None:
                continue
            if hasattr(queryset, "restrict"):
                relation.queryset = queryset.restrict(user)
        return fields

    def validate(self, attrs):
        attrs = super().validate(attrs)
        if self.instance is not None:
            for name in self.create_only_fields:
                if name in attrs and attrs[name] != getattr(self.instance, name):
                    raise serializers.ValidationError({name: "This field cannot change after creation."})
        instance = self.build_instance(attrs)
        self.check_write_permission(instance)
        self.full_clean(instance)
        return attrs

    def build_instance(self, attrs):
        """The object as it would be saved (not saved): a copy of the stored one with attrs applied."""
        model = self.Meta.model
        instance = model.objects.get(pk=self.instance.pk) if self.instance is not None else model()
        for name, value in attrs.items():
            if not model._meta.get_field(name).many_to_many:
                setattr(instance, name, value)
        self.prepare_instance(instance)
        return instance

    def prepare_instance(self, instance) -> None:
        """Hook: set fields the request does not carry (e.g. the owner) before checks run."""

    def check_write_permission(self, instance) -> None:
        request = self.context.get("request")
        if request is not None and not allowed(request.user, instance, CHANGE):
            raise PermissionDenied(refusal(request.user, instance))

    def full_clean(self, instance) -> None:
        try:
            instance.full_clean()
        except DjangoValidationError as exc:
            raise api_error(exc) from exc


class PrimaryKeyListField(serializers.ManyRelatedField):
    """A list of primary keys looked up in one query (DRF's many=True asks once per id), at most
    `max_length` of them; an id the user may not see is refused like one that does not exist."""

    default_error_messages = {
        **serializers.ManyRelatedField.default_error_messages,
        "max_length": "At most {max_length} ids may be given.",
        "does_not_exist": 'Invalid pk "{pk_value}" - object does not exist.',
        "incorrect_type": "Incorrect type. Expected pk value, received {data_type}.",
        "null": "This list may not contain null.",
    }

    def __init__(self, queryset, max_length: int, **kwargs):
        self.max_length = max_length
        super().__init__(child_relation=AsciiPrimaryKeyRelatedField(queryset=queryset), **kwargs)

    def to_internal_value(self, data):
        if isinstance(data, (str, bytes)) or not hasattr(data, "__iter__"):
            self.fail("not_a_list", input_type=type(data).__name__)
        data = list(data)
        if not self.allow_empty and not data:
            self.fail("empty")
        if len(data) > self.max_length:
            self.fail("max_length", max_length=self.max_length)
        ids = []
        for value in data:
            if value is None:
                self.fail("null")
            if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).isascii() \
                    or not str(value).isdigit():
                self.fail("incorrect_type", data_type=type(value).__name__)
            ids.append(int(value))
        found = self.child_relation.get_queryset().in_bulk(set(ids))
        for pk in ids:
            if pk not in found:
                self.fail("does_not_exist", pk_value=pk)
        return [found[pk] for pk in dict.fromkeys(ids)]
