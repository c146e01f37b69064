"""The management API's version comparison: two versions of a model side by
side (:func:`models_store.registry.version_compare.compare`)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ParseError
from rest_framework.response import Response

from models_store.errors import NotFound
from models_store.identifiers import MAX_VERSION_NUMBER
from models_store.registry import charts, version_compare
from models_store.registry.api import base
from models_store.web.openapi import errors

_ROWS = serializers.ListField(child=serializers.DictField(child=serializers.JSONField()))


class ComparisonSerializer(serializers.Serializer):
    """Two versions side by side: ``a`` and ``b`` (each version's facts),
    ``fields`` (``{"field", "a", "b", "same"}`` per fact), ``signature``
    (``{"kind", "name", "a", "b", "same"}`` per input and output; ``a``/``b``
    ``{"datatype", "shape"}`` or null), ``breaking`` (why callers of ``a``
    break on ``b``), ``breaking_back`` (of ``b`` on ``a``), ``validation``
    (both logs) and ``traffic`` (requests, errors and compute latency p50/p99
    in ms per step of the range, per version)."""

    model = serializers.CharField()
    a = serializers.DictField(child=serializers.JSONField())
    b = serializers.DictField(child=serializers.JSONField())
    fields = _ROWS
    signature = _ROWS
    breaking = serializers.ListField(child=serializers.CharField())
    breaking_back = serializers.ListField(child=serializers.CharField())
    validation = serializers.DictField(child=serializers.ListField(child=serializers.CharField()))
    traffic = serializers.DictField(child=serializers.JSONField())


class CompareQuerySerializer(serializers.Serializer):
    a = serializers.IntegerField(min_value=1, max_value=MAX_VERSION_NUMBER, help_text="One version's number.")
    b = serializers.IntegerField(min_value=1, max_value=MAX_VERSION_NUMBER, help_text="The other version's number.")
    range = serializers.ChoiceField(choices=list(charts.RANGES), default="hour", help_text="The traffic's window.")


class VersionCompareView(base.RegistryView):
    permission_actions = {"GET": "model.view"}  # models_store.accounts.permissions

    @extend_schema(
        operation_id=base.COMPARE_VERSIONS,
        parameters=[CompareQuerySerializer],
        responses={
            200: OpenApiResponse(ComparisonSerializer, description="The two versions side by side."),
            **errors(400, 401, 404, e404="no such model, or it has no version a or b"),
        },
    )
    def get(self, request, name: str):
        """Versions ``a`` and ``b`` of a model side by side: facts, signature
        (and what breaks from one to the other), validation logs and traffic."""
        query = CompareQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        model = self.detail(name)
        try:
            body = version_compare.compare(model, data["a"], data["b"], {"range": data["range"]})
        except KeyError as exc:
            raise NotFound(exc.args[0]) from None
        except ValueError as exc:
            raise ParseError(str(exc)) from None
        return Response(body)
