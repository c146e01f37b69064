"""The management API's models: the list (filtered, sorted, paged), one
model in full, its changes (description, version policy, instance groups,
payload logging), its deletion and its audit log."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import ParseError
from rest_framework.response import Response

from models_store import audit
from models_store.accounts import selectors as accounts
from models_store.registry import actions, selectors
from models_store.registry.api import base
from models_store.registry.models import ModelVersion
from models_store.registry.serializers import (
    AuditEventSerializer,
    ModelDetailSerializer,
    ModelSerializer,
    ModelUpdateSerializer,
)
from models_store.web.api import KEYSET_PAGE_PARAMETERS, PAGE_PARAMETERS
from models_store.web.openapi import LinkedResponse, errors, paginated


class ModelListView(base.RegistryView):
    permission_actions = {"GET": "models.list"}  # models_store.accounts.permissions

    @extend_schema(
        operation_id=base.LIST_MODELS,
        parameters=[
            *KEYSET_PAGE_PARAMETERS,
            OpenApiParameter("name", str, description="Only models whose name contains this (any case)."),
            OpenApiParameter("team", str, description="Only this team's models ('-': the operators' models)."),
            OpenApiParameter(
                "state", str, enum=ModelVersion.State.values, description="Only models with a version in this state."
            ),
            OpenApiParameter(
                "order", str, enum=list(selectors.MODEL_ORDERINGS), description="Sort key (default: name)"
            ),
            *base.SEARCH_PARAMETERS,
        ],
        responses={
            200: LinkedResponse(
                paginated(ModelSerializer),
                description="A page of models, by name.",
                links=base.model_links("$response.body#/results/0/name"),
            ),
            **errors(400, 401, 404, e404="`after` names no model."),
        },
    )
    def get(self, request):
        """A page of the models (``limit``/``offset``, or ``after`` a model's
        name: a keyset page; ``count`` is the total) with their team, version
        policy, served versions, labels and versions, filtered by ``name``,
        ``team``, ``state``, ``q`` (name or descriptions) and ``tag`` (``key``
        or ``key=value``, repeatable) and sorted by ``order``
        (with INFERENCE_REQUIRE_TOKEN, only the models of the caller's teams;
        every model for operators)."""
        # One of the schema's values (a state in any case), not empty (the web UI's form sends "" for any).
        for key in ("state", "order"):
            if key in request.query_params and not request.query_params[key].strip():
                raise ParseError(f"{key} is empty: leave it out for any")
        try:
            where = selectors.ModelFilter.from_params(request.query_params)
        except ValueError as exc:
            raise ParseError(str(exc)) from None
        teams = accounts.visible_team_ids(request.user, self.token)
        return self.page(
            selectors.model_listing(teams, where, prefetched=False),
            ModelSerializer,
            keyset=selectors.MODEL_ORDERINGS[where.order],
        )


class ModelDetailView(base.RegistryView):
    permission_actions = {
        "GET": "model.view",
        "PATCH": "model.update",
        "DELETE": "model.delete",
    }  # models_store.accounts.permissions

    @extend_schema(
        operation_id=base.GET_MODEL,
        responses={
            200: LinkedResponse(
                ModelDetailSerializer,
                description="The model.",
                links=(
                    *base.model_links("$request.path.name"),
                    *base.version_links("$request.path.name", "$response.body#/versions/0/number"),
                ),
            ),
            **errors(401, 404),
        },
    )
    def get(self, request, name: str):
        """One model with every version in full (signature, state, reason, validation log)."""
        return Response(self.model_body(name))

    @extend_schema(
        operation_id=base.UPDATE_MODEL,
        request=ModelUpdateSerializer,
        responses={
            200: OpenApiResponse(ModelDetailSerializer, description="The model as changed."),
            **errors(
                400, 401, 403, 404, 409, 415,
                e409="a version policy that would serve no READY version, or lists versions the model does not have",
            ),
        },
    )  # fmt: skip
    def patch(self, request, name: str):
        """Change the description, the tags (replaced whole), the version policy (``latest`` N, ``all``,
        ``specific`` versions), the instance group and/or payload logging
        (``payload_log_rate``, ``payload_log_max_bytes``). A policy that would
        serve no READY version is refused (409)."""
        serializer = ModelUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        description = data.pop("description", None)
        tags = data.pop("tags", None)
        groups = data.pop("instance_group", None)
        groups = [dict(g) for g in groups] if groups is not None else None
        logging_ = {key: data.pop(key) for key in ("payload_log_rate", "payload_log_max_bytes") if key in data}
        force = data.pop("force", False)
        actions.update_model(
            request.user, self.token, name, description=description, policy=data, instance_group=groups,
            payload_logging=logging_, force=force, tags=tags,
        )  # fmt: skip
        return Response(self.model_body(name))

    @extend_schema(
        operation_id=base.DELETE_MODEL,
        responses={
            204: OpenApiResponse(description="Deleted, with every version and its artifact."),
            **errors(
                401, 403, 404, 409,
                e409="a READY ensemble runs one of its versions, its traffic split sends requests to one of its "
                "labels, a rollout of it is running or paused, or it sends shadow traffic (error names each)",
            ),
        },
    )  # fmt: skip
    def delete(self, request, name: str):
        """Delete the model with every version (each removed as ``DELETE
        .../versions/<n>/`` removes one: its artifact goes), its labels,
        traffic split and rollouts' history; audited ``model.delete``, a
        ``model.deleted`` webhook event. Refused (409, naming each reason)
        while a READY ensemble runs one of its versions, its traffic split
        sends requests to one of its labels (``PUT .../traffic/`` with ``{}``
        first), a rollout of it is running or paused, or it sends shadow
        traffic. The name may then be uploaded again as a new model."""
        actions.delete_model(request.user, self.token, name)
        return Response(status=status.HTTP_204_NO_CONTENT)


class AuditView(base.RegistryView):
    permission_actions = {"GET": "model.view"}  # models_store.accounts.permissions

    @extend_schema(
        operation_id=base.AUDIT_LOG,
        parameters=PAGE_PARAMETERS,
        responses={200: paginated(AuditEventSerializer), **errors(400, 401, 404)},
    )
    def get(self, request, name: str):
        """A page of the changes of a model (who, what, when), newest first
        (``limit``/``offset``; ``count`` is the total)."""
        return self.page(audit.for_model(self.visible(name)), AuditEventSerializer)
