"""The management API's serializer fields, strict about JSON types, and its
one error shape (:class:`ErrorSerializer`). Everything the OpenAPI schema
says about a field comes from the serializers (through drf-spectacular):
these make it say ``integer``, ``number``, ``boolean`` and ``string`` and
mean it, and input text may not hold NUL characters (PostgreSQL cannot
store them).
"""

from __future__ import annotations

from django.core.validators import ProhibitNullCharactersValidator, RegexValidator
from rest_framework import serializers


class Integer(serializers.IntegerField):
    """An IntegerField that takes JSON integers only: not strings of digits,
    not floats, not booleans (the schema says ``integer``)."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class Number(serializers.FloatField):
    """A FloatField that takes JSON numbers only (not strings, not booleans:
    the schema says ``number``)."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            self.fail("invalid")
        return super().to_internal_value(data)


class Boolean(serializers.BooleanField):
    """A BooleanField that takes JSON ``true`` and ``false`` only (not 0, 1 or strings)."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class TextField(serializers.CharField):
    """A CharField for strings only (DRF would take a number as its text)
    whose refusal of NUL characters (PostgreSQL cannot store them) is a
    RegexValidator, so that the schema shows it as a pattern (a blank value
    is ``allow_blank``'s to accept or refuse)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.validators = [v for v in self.validators if not isinstance(v, ProhibitNullCharactersValidator)]
        self.validators.append(RegexValidator(r"\A[^\x00]+\Z", "Null characters are not allowed."))

    def to_internal_value(self, data):
        if not isinstance(data, str):  # DRF would take numbers as text; the schema says string
            self.fail("invalid")
        return super().to_internal_value(data)


class ErrorSerializer(serializers.Serializer):
    """Every 4xx of the management API: one sentence saying what is wrong;
    ``fields`` (validation errors only) maps each invalid field (nested ones
    as ``instance_group.0.gpus``) to its messages."""

    error = serializers.CharField()
    fields = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        required=False,
        help_text="Validation errors only: messages by field.",
    )
    differences = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="A 409 of the signature guard only: each way the change would break a route's callers.",
    )
