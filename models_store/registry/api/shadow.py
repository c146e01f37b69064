"""The management API's shadow traffic of a model: set it (a READY version
gets a copy of a percentage of the model's requests after their live
answers, compared and discarded), end it, and read it with the comparison
of the shadow's answers with the live ones (:mod:`models_store.registry.comparisons`)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ParseError
from rest_framework.response import Response

from models_store.identifiers import MAX_VERSION_NUMBER
from models_store.registry import actions, charts, comparisons
from models_store.registry.api import base
from models_store.web.fields import Integer, Number
from models_store.web.openapi import LinkedResponse, OpenApiLink, errors


class ShadowSerializer(serializers.Serializer):
    """Shadow traffic: a copy of ``percent`` percent of the model's requests
    goes to ``version`` after their live answers; its answers are compared
    with the live ones and discarded (never delay the live answer)."""

    version = Integer(
        min_value=1, max_value=MAX_VERSION_NUMBER,
        help_text="A READY version other than the one requests that name no version get now (else 409).",
    )  # fmt: skip
    percent = Number(min_value=0, max_value=100, help_text="Share of the model's requests copied, 0 to 100.")


class ShadowConfigSerializer(serializers.Serializer):
    version = Integer(help_text="The shadow version.")
    percent = Number(help_text="Share of the model's requests copied, 0 to 100.")
    serving = serializers.BooleanField(help_text="Whether the copies run now (the version is READY, percent > 0).")


class OutputComparisonSerializer(serializers.Serializer):
    """One output's comparison over the range (inference/shadow/comparison.py)."""

    compared = Integer(help_text="Requests whose output was compared.")
    exact_matches = Integer(help_text="Of them, bitwise-equal arrays.")
    exact_match_share = Number(allow_null=True, help_text="exact_matches / compared (0..1).")
    mismatched_shapes = Integer(help_text="Of them, arrays of another datatype or shape (not diffed).")
    elements = Integer(help_text="Elements whose absolute difference was taken.")
    max_abs_diff = Number(allow_null=True, help_text="The largest |live - shadow| (the output's units).")
    mean_abs_diff = Number(allow_null=True, help_text="The mean |live - shadow| over every element compared.")
    nonfinite_diffs = Integer(help_text="Elements whose difference is NaN or infinite (left out of the two).")
    argmax_rows = Integer(help_text="Rows of a classifier's output ([batch, classes] floats) compared by argmax.")
    argmax_agreement = Number(allow_null=True, help_text="Share of those rows with the same argmax (0..1).")


class ShadowReportSerializer(serializers.Serializer):
    """A model's shadow traffic and the comparison over a range: totals, and
    per step (``times``: step starts, seconds since the epoch) for charts."""

    model = serializers.CharField()
    shadow = ShadowConfigSerializer(allow_null=True, help_text="The shadow traffic now; null: none.")
    version = Integer(allow_null=True, help_text="The shadow version compared (null: none in the range).")
    range = serializers.ChoiceField(choices=list(charts.RANGES))
    step_seconds = Integer()
    start = Integer()
    end = Integer()
    times = serializers.ListField(child=Integer())
    requests = Integer(help_text="Copies run on the shadow version (compared or failed).")
    errors = Integer(help_text="Copies the shadow version refused or failed.")
    dropped = Integer(help_text="Copies dropped because a server process's shadow queue was full.")
    busy = Integer(help_text="Copies not run because the server was busy (requests waiting for the seats).")
    outputs = serializers.DictField(child=OutputComparisonSerializer(), help_text="Output name -> comparison.")
    series = serializers.DictField(help_text="requests, errors, dropped, busy and outputs.<name>.<share> per step.")


def _links() -> tuple[OpenApiLink, ...]:
    where = {"name": "$request.path.name"}
    return (
        OpenApiLink("GetShadow", base.GET_SHADOW, where, description="The shadow traffic and its comparison."),
        OpenApiLink("ClearShadow", base.CLEAR_SHADOW, where, description="End the shadow traffic."),
        OpenApiLink("GetAuditLog", base.AUDIT_LOG, where, description="The audit log (shadow.set, shadow.clear)."),
    )


class ShadowView(base.RegistryView):
    permission_actions = {"GET": "model.view", "PUT": "shadow.set", "DELETE": "shadow.set"}  # accounts.permissions

    @extend_schema(
        operation_id=base.GET_SHADOW,
        parameters=[
            OpenApiParameter("range", str, enum=list(charts.RANGES), description="The range compared (default hour)."),
            OpenApiParameter(
                "version",
                {"type": "integer", "minimum": 1, "maximum": MAX_VERSION_NUMBER},
                description="The shadow version compared (default: the shadow version now).",
            ),
        ],
        responses={200: ShadowReportSerializer, **errors(400, 401, 404)},
    )
    def get(self, request, name: str):
        """The model's shadow traffic and the comparison of the shadow
        version's answers with the live ones over the last hour (1-minute
        steps), day (5-minute) or week (1-hour), per output: exact-match
        share, max and mean absolute difference, argmax agreement (every
        server process's counts, written every CHART_FLUSH_SECONDS)."""
        model = self.visible(name)
        version = request.query_params.get("version")
        if version is not None and not (version.isdigit() and 0 < int(version) <= MAX_VERSION_NUMBER):
            raise ParseError(f"version must be a version number from 1 to {MAX_VERSION_NUMBER}")
        try:
            report = comparisons.shadow_report(
                model, int(version) if version else None, request.query_params.get("range", "hour")
            )
        except ValueError as exc:
            raise ParseError(str(exc)) from None
        return Response(report)

    @extend_schema(
        operation_id=base.SET_SHADOW,
        request=ShadowSerializer,
        responses={
            200: LinkedResponse(ShadowReportSerializer, description="The shadow traffic set.", links=_links()),
            **errors(
                400, 401, 403, 404, 409, 415,
                e409="an ensemble, no such version, a version that is not READY, or the version requests that "
                "name no version get now (the default route)",
            ),
        },
    )  # fmt: skip
    def put(self, request, name: str):
        """Send a copy of ``percent`` percent of the model's requests to
        ``version`` after their live answers, e.g. ``{"version": 2,
        "percent": 10}`` (replaces any shadow traffic). Its answers are
        compared with the live ones and discarded; the copies never delay
        the live answer (a bounded queue per server process; dropped under
        load and counted). Audited (``shadow.set``)."""
        serializer = ShadowSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        model = actions.set_shadow(request.user, self.token, name, data["version"], data["percent"])
        return Response(comparisons.shadow_report(model, None, "hour"))

    @extend_schema(
        operation_id=base.CLEAR_SHADOW,
        request=None,
        responses={204: None, **errors(401, 403, 404, e404="no such model, or it has no shadow traffic")},
    )
    def delete(self, request, name: str):
        """End the model's shadow traffic (the comparisons made are kept). Audited (``shadow.clear``)."""
        if not actions.clear_shadow(request.user, self.token, name):
            return Response({"error": f"model '{name}' has no shadow traffic"}, status=status.HTTP_404_NOT_FOUND)
        return Response(status=status.HTTP_204_NO_CONTENT)
