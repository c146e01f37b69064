"""The management API's routes of a model: version labels and the traffic
split (set, promote the canary, roll back)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from models_store.registry import actions
from models_store.registry.api import base
from models_store.registry.serializers import LabelSerializer, ModelDetailSerializer, TrafficSerializer
from models_store.web.openapi import LinkedResponse, OpenApiLink, errors


class LabelView(base.RegistryView):
    permission_actions = {"PUT": "label.set", "DELETE": "label.delete"}  # models_store.accounts.permissions

    @extend_schema(
        operation_id=base.SET_LABEL,
        request=LabelSerializer,
        responses={
            200: LinkedResponse(
                ModelDetailSerializer,
                description="The model, with the version label set.",
                links=(
                    OpenApiLink(
                        "DeleteLabel",
                        base.DELETE_LABEL,
                        {"name": "$request.path.name", "label": "$request.path.label"},
                        description="Remove the version label.",
                    ),
                ),
            ),
            **errors(
                400,
                401,
                403,
                404,
                409,
                415,
                e409="the model has no such version, or the version is not READY, "
                "or its signature would break the label's callers (see differences; force to do it anyway)",
            ),
        },
    )
    def put(self, request, name: str, label: str):
        """Point version label ``label`` at a READY version."""
        serializer = LabelSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        actions.set_label(request.user, self.token, name, label, data["version"], force=data["force"])
        return Response(self.model_body(name))

    @extend_schema(
        operation_id=base.DELETE_LABEL,
        responses={204: None, **errors(401, 403, 404, 409, e409="the traffic split sends requests to the label")},
    )
    def delete(self, request, name: str, label: str):
        """Remove a version label. Refused (409, naming the split) while the
        traffic split sends requests to it; with weight 0 it leaves the split
        (audited ``traffic.set``)."""
        actions.delete_label(request.user, self.token, name, label)
        return Response(status=status.HTTP_204_NO_CONTENT)


class TrafficView(base.RegistryView):
    permission_actions = {"PUT": "traffic.set"}  # models_store.accounts.permissions

    @extend_schema(
        operation_id=base.SET_TRAFFIC,
        request=TrafficSerializer,
        responses={
            200: LinkedResponse(
                ModelDetailSerializer, description="The model, with its traffic split.", links=base.traffic_links()
            ),
            **errors(
                400, 401, 403, 404, 409, 415,
                e409="the weights do not add up to 100, or name a version label the model does not have "
                "or one on a version that is not READY, or the default route would serve a version whose "
                "signature breaks its callers (see differences; force to do it anyway)",
            ),
        },
    )  # fmt: skip
    def put(self, request, name: str):
        """Split the inference requests that name no version (V2 without
        ``/versions/``, TF Serving without a version or label) between version
        labels by weight, e.g. ``{"weights": {"stable": 90, "canary": 10}}``;
        ``{"weights": {}}`` clears the split. The versions it sends requests to
        serve whatever the version policy says; each answer names its version.
        Audited (``traffic.set``)."""
        serializer = TrafficSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        actions.set_traffic(request.user, self.token, name, dict(data["weights"]), force=data["force"])
        return Response(self.model_body(name))


class TrafficPromoteView(base.RegistryView):
    permission_actions = {"POST": "traffic.promote"}  # models_store.accounts.permissions

    @extend_schema(
        operation_id=base.PROMOTE_CANARY,
        request=None,
        parameters=[base.force_parameter("Promote even though the callers of 'stable' would break.")],
        responses={
            200: LinkedResponse(ModelDetailSerializer, description="The canary promoted.", links=base.traffic_links()),
            **errors(
                400, 401, 403, 404, 409,
                e409="the model has no version label 'canary' on a READY version, or its signature would break "
                "the callers of 'stable' (see differences; ?force=true to do it anyway)",
            ),
        },
    )  # fmt: skip
    def post(self, request, name: str):
        """Promote the canary: label ``stable`` moves to the version of label
        ``canary`` and every unversioned request goes to it (split ``stable``
        100, ``canary`` 0). Audited (``traffic.promote``)."""
        actions.promote_canary(request.user, self.token, name, force=base.query_force(request))
        return Response(self.model_body(name))


class TrafficRollbackView(base.RegistryView):
    permission_actions = {"POST": "traffic.rollback"}  # models_store.accounts.permissions

    @extend_schema(
        operation_id=base.ROLLBACK_CANARY,
        request=None,
        responses={
            200: LinkedResponse(
                ModelDetailSerializer, description="The model, rolled back.", links=base.traffic_links()
            ),
            **errors(401, 403, 404, 409, e409="the model has no version label 'stable' on a READY version"),
        },
    )
    def post(self, request, name: str):
        """Roll the canary back: every unversioned request goes to label
        ``stable`` again (split ``stable`` 100, ``canary`` 0; labels stay).
        Audited (``traffic.rollback``)."""
        actions.rollback_canary(request.user, self.token, name)
        return Response(self.model_body(name))
