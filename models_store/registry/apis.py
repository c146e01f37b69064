"""The management API (DRF): models, model versions, uploads, version labels,
version policies and the audit log.

Authentication: ``Authorization: Bearer <API token>`` (scripts) or the web
UI's session (with CSRF). Every 4xx answers one shape (declared once in the
schema: :class:`~models_store.serializers.ErrorSerializer`):
``{"error": "<one sentence>", "fields": {<field>: [<messages>]}}``, with
``fields`` only for validation errors. 400: malformed (the request does not
match the schema, or an upload that is not an ONNX model with exactly its data files);
401; 403 (not your team's model); 404 (no such model, version, label or
team; with INFERENCE_REQUIRE_TOKEN also a model the caller may not see);
409 (refused by the registry's current state: the same bytes twice, a
version policy that would serve nothing, a label on a version that is not
READY, retiring a labelled version, deleting what a traffic split uses,
...); 413 (above MAX_UPLOAD_BYTES); 415; 422 (the upload failed validation:
the error and the FAILED version, which is kept); 503 with ``Retry-After``
(the database, the storage backend or the broker is down: nothing was
changed, try again); 507 (no space left on the server for an upload).

What a caller sees: every model while INFERENCE_REQUIRE_TOKEN is off (as
the web UI shows every signed-in user); with it on, only the models of the
caller's teams (the token's team for a team token), as the data plane:
other models answer 404 on every route, and are missing from the list;
operators see every model (:mod:`models_store.permissions`).
"""

from __future__ import annotations

import logging

from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import JSONParser, MultiPartParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from models_store import outages
from models_store.accounts import permissions
from models_store.accounts.authentication import BearerTokenAuthentication
from models_store.intake import uploads
from models_store.models import ApiToken, ModelVersion
from models_store.registry import actions, selectors
from models_store.registry.serializers import (
    AuditEventSerializer,
    LabelSerializer,
    ModelDetailSerializer,
    ModelSerializer,
    ModelUpdateSerializer,
    TrafficSerializer,
    UploadFailedSerializer,
    UploadSerializer,
    VersionSerializer,
)
from models_store.web.openapi import LinkedResponse, ManagementAutoSchema, OpenApiLink, errors, paginated
from models_store.web.pagination import DEFAULT_LIMIT, MAX_LIMIT, ListPage

logger = logging.getLogger(__name__)


def field_errors(detail, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested validation errors as ``{"field.index.subfield": [messages]}``."""
    flat: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            for name, messages in field_errors(value, f"{prefix}.{key}" if prefix else str(key)).items():
                flat.setdefault(name, []).extend(messages)
    elif isinstance(detail, list):
        for index, item in enumerate(detail):
            if isinstance(item, (dict, list)):
                nested = field_errors(item, f"{prefix}.{index}" if prefix else str(index))
                for name, messages in nested.items():
                    flat.setdefault(name, []).extend(messages)
            else:
                flat.setdefault(prefix, []).append(str(item))
    else:
        flat.setdefault(prefix, []).append(str(detail))
    return flat


def validation_error_body(exc: ValidationError) -> dict:
    """``{"error": "<one sentence>", "fields": {...}}`` of a DRF validation error;
    errors that concern no field go into the sentence only."""
    flat = field_errors(exc.detail)
    general = flat.pop("", []) + flat.pop(api_settings.NON_FIELD_ERRORS_KEY, [])
    if not flat:
        return {"error": " ".join(general) or "invalid request"}
    if len(flat) == 1 and not general:
        ((name, messages),) = flat.items()
        sentence = f"{name}: {' '.join(messages)}"
    else:
        sentence = " ".join([*general, f"invalid fields: {', '.join(flat)}"])
    return {"error": sentence, "fields": flat}


def api_exception_handler(exc, context) -> Response:
    """Every error as ``{"error": ...}`` (validation errors with ``fields``):
    action errors with their status, DRF's own (401, 403, 404, 405, 415,
    parse errors), Django's refusals of a form body beyond its limits (400,
    413); a dependency that is down 503 with ``Retry-After``, a full disk
    507 (:func:`models_store.outages.http_answer`); anything unexpected is
    logged and answered 500."""
    code = actions.http_status(exc)
    if code is not None:
        body = {"error": str(exc)}
        if getattr(exc, "differences", None):  # the signature guard's
            body["differences"] = exc.differences
        return Response(body, status=code)
    if isinstance(exc, SuspiciousOperation):  # Django's limits on a form body (fields, files, size)
        return Response({"error": str(exc)}, status=413 if isinstance(exc, RequestDataTooBig) else 400)
    response = drf_exception_handler(exc, context)
    if response is None:
        outage = outages.http_answer(exc)
        if outage is not None:  # a dependency is down, or the disk is full: not the request's fault
            status, message, headers = outage
            logger.warning("management API answered %s: %s: %s", status, type(exc).__name__, exc)
            return Response({"error": message}, status=status, headers=headers)
        logger.exception("unexpected error in the management API", exc_info=exc)
        return Response({"error": f"internal error ({type(exc).__name__}); see the server log"}, status=500)
    if isinstance(exc, ValidationError):
        response.data = validation_error_body(exc)
    elif isinstance(response.data, dict) and "detail" in response.data:
        response.data = {"error": str(response.data["detail"])}
    else:
        response.data = {"error": str(exc)}
    return response


# operationIds: drf-spectacular's own (from the paths), kept stable for generated clients.
LIST_MODELS = "models_list"
GET_MODEL = "models_retrieve"
UPDATE_MODEL = "models_partial_update"
LIST_VERSIONS = "models_versions_list"
UPLOAD_VERSION = "models_versions_create"
GET_VERSION = "models_versions_retrieve"
DELETE_VERSION = "models_versions_destroy"
RETIRE_VERSION = "models_versions_retire_create"
RESTORE_VERSION = "models_versions_restore_create"
SET_LABEL = "models_labels_update"
DELETE_LABEL = "models_labels_destroy"
AUDIT_LOG = "models_audit_list"
SET_TRAFFIC = "models_traffic_update"
PROMOTE_CANARY = "models_traffic_promote_create"
ROLLBACK_CANARY = "models_traffic_rollback_create"


def _version_links(name: str, number: str, only: tuple[str, ...] = ()) -> tuple[OpenApiLink, ...]:
    """Links to the operations on one version (``name``, ``number``: runtime
    expressions); ``only`` these links when given."""
    where = {"name": name, "number": number}
    links = (
        OpenApiLink("GetVersion", GET_VERSION, where, description="The version."),
        OpenApiLink("RetireVersion", RETIRE_VERSION, where, description="Stop serving the version."),
        OpenApiLink("RestoreVersion", RESTORE_VERSION, where, description="Serve the retired version again."),
        OpenApiLink("DeleteVersion", DELETE_VERSION, where, description="Delete the version."),
    )
    return tuple(link for link in links if not only or link.name in only)


def _model_links(name: str) -> tuple[OpenApiLink, ...]:
    """Links to the operations on one model (``name``: a runtime expression)."""
    where = {"name": name}
    return (
        OpenApiLink("GetModel", GET_MODEL, where, description="The model."),
        OpenApiLink("UpdateModel", UPDATE_MODEL, where, description="Change its description or version policy."),
        OpenApiLink("ListVersions", LIST_VERSIONS, where, description="Its versions."),
        OpenApiLink("UploadVersion", UPLOAD_VERSION, where, description="Upload its next version."),
        OpenApiLink("GetAuditLog", AUDIT_LOG, where, description="Its audit log."),
        OpenApiLink("SetTraffic", SET_TRAFFIC, where, description="Split its unversioned requests between labels."),
        OpenApiLink("PromoteCanary", PROMOTE_CANARY, where, description="Promote its canary to stable."),
        OpenApiLink("RollbackCanary", ROLLBACK_CANARY, where, description="Send all its traffic to stable."),
    )


UPLOADED_LINKS = (
    *_version_links("$request.path.name", "$response.body#/number"),
    OpenApiLink("GetModel", GET_MODEL, {"name": "$request.path.name"}, description="The model of the version."),
    OpenApiLink(
        "SetLabel",
        SET_LABEL,
        {"name": "$request.path.name"},
        request_body={"version": "$response.body#/number"},
        description="Point a version label at the version (once it is READY).",
    ),
)


class ManagementView(APIView):
    """Base of the management API's views: token or session authentication,
    JSON, the one error shape, the management API's schema class."""

    # The session is the web UI's (its scripts call the API); DRF enforces CSRF for it.
    authentication_classes = [BearerTokenAuthentication, SessionAuthentication]
    permission_classes = [IsAuthenticated]
    renderer_classes = [JSONRenderer]
    parser_classes = [JSONParser]
    schema = ManagementAutoSchema()

    def get_exception_handler(self):
        return api_exception_handler

    @property
    def token(self) -> ApiToken | None:
        auth = self.request.auth
        return auth if isinstance(auth, ApiToken) else None

    def visible(self, name: str):
        """The model ``name`` if the caller may see it, else 404 (see :mod:`models_store.permissions`)."""
        return actions.visible_model(self.request.user, self.token, name)

    def detail(self, name: str):
        """The model ``name`` with its versions and labels prefetched, if the caller may see it, else 404."""
        model = selectors.model_detail(name)
        if model is None or not permissions.can_see_model(self.request.user, model, self.token):
            raise actions.NotFound(f"unknown model '{name}'")
        return model

    def page(self, items, serializer_class) -> Response:
        """One page of ``items`` (a query or a list) as :class:`ListPage` answers it."""
        paginator = ListPage()
        page = paginator.paginate_queryset(items, self.request, view=self)
        return paginator.get_paginated_response(serializer_class(page, many=True).data)

    def model_body(self, name: str) -> dict:
        """The model as :class:`ModelDetailSerializer` answers it, if the caller may see it."""
        return ModelDetailSerializer(self.detail(name)).data


PAGE_PARAMETERS = [
    OpenApiParameter(
        "limit", {"type": "integer", "minimum": 1},
        description=f"Items per page (default {DEFAULT_LIMIT}; more than {MAX_LIMIT}: {MAX_LIMIT}).",
    ),
    OpenApiParameter("offset", {"type": "integer", "minimum": 0}, description="Items to skip (default 0)."),
]  # fmt: skip


class ModelListView(ManagementView):
    @extend_schema(
        operation_id=LIST_MODELS,
        parameters=[
            *PAGE_PARAMETERS,
            OpenApiParameter("name", str, description="Only models whose name contains this (any case)."),
            OpenApiParameter("team", str, description="Only this team's models ('-': the operators' models)."),
            OpenApiParameter(
                "state", str, enum=ModelVersion.State.values, description="Only models with a version in this state."
            ),
            OpenApiParameter(
                "order", str, enum=list(selectors.MODEL_ORDERINGS), description="Sort key (default: name)"
            ),
        ],
        responses={
            200: LinkedResponse(
                paginated(ModelSerializer),
                description="A page of models, by name.",
                links=_model_links("$response.body#/results/0/name"),
            ),
            **errors(400, 401),
        },
    )
    def get(self, request):
        """A page of the models (``limit``/``offset``; ``count`` is the total)
        with their team, version policy, served versions, labels and versions,
        filtered by ``name``, ``team`` and ``state`` and sorted by ``order``
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
        teams = permissions.visible_team_ids(request.user, self.token)
        return self.page(selectors.model_listing(teams, where), ModelSerializer)


class ModelDetailView(ManagementView):
    @extend_schema(
        operation_id=GET_MODEL,
        responses={
            200: LinkedResponse(
                ModelDetailSerializer,
                description="The model.",
                links=(
                    *_model_links("$request.path.name"),
                    *_version_links("$request.path.name", "$response.body#/versions/0/number"),
                ),
            ),
            **errors(401, 404),
        },
    )
    def get(self, request, name: str):
        """One model with every version in full (signature, state, reason, validation log)."""
        return Response(self.model_body(name))

    @extend_schema(
        operation_id=UPDATE_MODEL,
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
        """Change the description, the version policy (``latest`` N, ``all``,
        ``specific`` versions), the instance group and/or payload logging
        (``payload_log_rate``, ``payload_log_max_bytes``). A policy that would
        serve no READY version is refused (409)."""
        serializer = ModelUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        description = data.pop("description", None)
        groups = data.pop("instance_group", None)
        groups = [dict(g) for g in groups] if groups is not None else None
        logging_ = {key: data.pop(key) for key in ("payload_log_rate", "payload_log_max_bytes") if key in data}
        force = data.pop("force", False)
        actions.update_model(
            request.user, self.token, name, description=description, policy=data, instance_group=groups,
            payload_logging=logging_, force=force,
        )  # fmt: skip
        return Response(self.model_body(name))


class VersionListView(ManagementView):
    """GET: the versions of a model. POST: upload a new version (multipart)."""

    parser_classes = [MultiPartParser]

    def initialize_request(self, request, *args, **kwargs):
        self.upload_handler = uploads.install(request) if request.method == "POST" else None
        return super().initialize_request(request, *args, **kwargs)

    def dispatch(self, request, *args, **kwargs):
        try:
            return super().dispatch(request, *args, **kwargs)
        finally:
            if self.upload_handler is not None:
                self.upload_handler.discard()

    @extend_schema(
        operation_id=LIST_VERSIONS,
        parameters=PAGE_PARAMETERS,
        responses={
            200: OpenApiResponse(paginated(VersionSerializer), description="A page of the versions, highest first."),
            **errors(400, 401, 404),
        },
    )
    def get(self, request, name: str):
        """A page of the versions of a model, highest first (``limit``/``offset``; ``count`` is the total)."""
        return self.page(self.detail(name).versions.all(), VersionSerializer)

    @extend_schema(
        operation_id=UPLOAD_VERSION,
        request={"multipart/form-data": UploadSerializer},
        responses={
            201: LinkedResponse(VersionSerializer, description="Validated: READY.", links=UPLOADED_LINKS),
            202: LinkedResponse(
                VersionSerializer,
                description="Accepted; a worker validates it (poll the version; its log says where it waits or runs).",
                links=UPLOADED_LINKS,
            ),
            **errors(
                400, 401, 403, 404, 409, 413, 415,
                e404="the model does not exist and no team was given to create it, or the team does not exist",
                e409="the model already has these bytes as a version; or, with tokens required, the name is taken "
                "by a model the caller may not see",
            ),
            422: OpenApiResponse(UploadFailedSerializer, description="Validation failed: the FAILED version is kept."),
        },
        parameters=[
            OpenApiParameter(
                "Location", str, OpenApiParameter.HEADER, response=[201, 202], description="The new version's URL."
            )
        ],
    )  # fmt: skip
    def post(self, request, name: str):
        """Upload an ONNX file as the next version of model ``name``, or an
        ensemble's config.pbtxt alone (``platform: "ensemble"``, no file: a
        READY version pinning the versions it composes; 400 or 409 naming
        the step it refuses). When
        the model does not exist yet the upload creates it for ``team``
        (required then; without it the answer is 404). With ``config`` (a
        Triton config.pbtxt) it replaces the model's configuration, and a
        field this server does not support is refused (400). Validation (ONNX
        checker, ONNX Runtime session, signature, warm-up inference) runs as
        a task: in the embedded mode before this answers (201 READY or 422
        FAILED), with a worker afterwards (202; poll the version)."""
        actions.check_upload(request.user, self.token, name)
        try:
            data = request.data
        except OSError as exc:
            if outages.no_space(exc):
                raise  # 507, not the client's fault
            raise ParseError(f"the upload was interrupted: {exc}") from None
        staged = self.upload_handler.result(required=False)  # an ensemble's upload is its config alone
        fields = UploadSerializer(data=data)
        fields.is_valid(raise_exception=True)
        team = fields.validated_data.get("team", "")
        description = fields.validated_data.get("description", "")
        config = fields.validated_data.get("config", "")
        version = actions.upload(request.user, self.token, name, staged, team, description, config)
        version.refresh_from_db()
        body = VersionSerializer(version).data
        headers = {"Location": f"/api/models/{name}/versions/{version.number}/"}
        if version.state == ModelVersion.State.FAILED:
            error = f"version {version.number} of '{name}' failed validation: {version.reason}"
            return Response({"error": error, "version": body}, status=422, headers=headers)
        code = status.HTTP_201_CREATED if version.state == ModelVersion.State.READY else status.HTTP_202_ACCEPTED
        return Response(body, status=code, headers=headers)


class VersionDetailView(ManagementView):
    @extend_schema(operation_id=GET_VERSION, responses={200: VersionSerializer, **errors(401, 404)})
    def get(self, request, name: str, number: int):
        """One version: state, reason, signature, sha256, size, validation log."""
        version = actions.get_version(self.visible(name), number)
        return Response(VersionSerializer(version).data)

    @extend_schema(
        operation_id=DELETE_VERSION,
        responses={
            204: None,
            **errors(401, 403, 404, 409, e409="the traffic split sends requests to a version label on the version"),
        },
    )
    def delete(self, request, name: str, number: int):
        """Delete a version, its labels and its artifact (the number is never
        reused). Refused (409, naming the split) while the model's traffic
        split sends requests to a label on it; a label on it the split gives
        weight 0 leaves the split (audited ``traffic.set``)."""
        actions.delete_version(request.user, self.token, name, number)
        return Response(status=status.HTTP_204_NO_CONTENT)


class VersionRetireView(ManagementView):
    @extend_schema(
        operation_id=RETIRE_VERSION,
        request=None,
        responses={
            200: LinkedResponse(
                VersionSerializer,
                description="The retired version (UNAVAILABLE).",
                links=_version_links("$request.path.name", "$response.body#/number", only=("RestoreVersion",)),
            ),
            **errors(401, 403, 404, 409, e409="the version is not READY, or a version label points at it"),
        },
    )
    def post(self, request, name: str, number: int):
        """Stop serving a READY version (state UNAVAILABLE); no label may point at it."""
        return Response(VersionSerializer(actions.retire_version(request.user, self.token, name, number)).data)


class VersionRestoreView(ManagementView):
    @extend_schema(
        operation_id=RESTORE_VERSION,
        request=None,
        responses={
            200: LinkedResponse(
                VersionSerializer,
                description="The version, READY again.",
                links=_version_links("$request.path.name", "$response.body#/number", only=("RetireVersion",)),
            ),
            **errors(401, 403, 404, 409, e409="the version is not retired (UNAVAILABLE)"),
        },
    )
    def post(self, request, name: str, number: int):
        """Serve a retired version again (READY)."""
        return Response(VersionSerializer(actions.restore_version(request.user, self.token, name, number)).data)


class LabelView(ManagementView):
    @extend_schema(
        operation_id=SET_LABEL,
        request=LabelSerializer,
        responses={
            200: LinkedResponse(
                ModelDetailSerializer,
                description="The model, with the version label set.",
                links=(
                    OpenApiLink(
                        "DeleteLabel",
                        DELETE_LABEL,
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
        operation_id=DELETE_LABEL,
        responses={204: None, **errors(401, 403, 404, 409, e409="the traffic split sends requests to the label")},
    )
    def delete(self, request, name: str, label: str):
        """Remove a version label. Refused (409, naming the split) while the
        traffic split sends requests to it; with weight 0 it leaves the split
        (audited ``traffic.set``)."""
        actions.delete_label(request.user, self.token, name, label)
        return Response(status=status.HTTP_204_NO_CONTENT)


class AuditView(ManagementView):
    @extend_schema(
        operation_id=AUDIT_LOG,
        parameters=PAGE_PARAMETERS,
        responses={200: paginated(AuditEventSerializer), **errors(400, 401, 404)},
    )
    def get(self, request, name: str):
        """A page of the changes of a model (who, what, when), newest first
        (``limit``/``offset``; ``count`` is the total)."""
        return self.page(selectors.audit_for_model(self.visible(name)), AuditEventSerializer)


def _traffic_links() -> tuple[OpenApiLink, ...]:
    where = {"name": "$request.path.name"}
    return (
        OpenApiLink("GetModel", GET_MODEL, where, description="The model."),
        OpenApiLink("PromoteCanary", PROMOTE_CANARY, where, description="Promote the canary to stable."),
        OpenApiLink("RollbackCanary", ROLLBACK_CANARY, where, description="Send all traffic to stable."),
        OpenApiLink("GetAuditLog", AUDIT_LOG, where, description="The audit log (traffic changes)."),
    )


class TrafficView(ManagementView):
    @extend_schema(
        operation_id=SET_TRAFFIC,
        request=TrafficSerializer,
        responses={
            200: LinkedResponse(
                ModelDetailSerializer, description="The model, with its traffic split.", links=_traffic_links()
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


class TrafficPromoteView(ManagementView):
    @extend_schema(
        operation_id=PROMOTE_CANARY,
        request=None,
        parameters=[
            OpenApiParameter(
                "force", bool, description="Promote even though the callers of 'stable' would break."
            )
        ],
        responses={
            200: LinkedResponse(ModelDetailSerializer, description="The canary promoted.", links=_traffic_links()),
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
        force = request.query_params.get("force", "false").lower()
        if force not in ("true", "false"):
            raise ParseError("force is true or false")
        actions.promote_canary(request.user, self.token, name, force=force == "true")
        return Response(self.model_body(name))


class TrafficRollbackView(ManagementView):
    @extend_schema(
        operation_id=ROLLBACK_CANARY,
        request=None,
        responses={
            200: LinkedResponse(ModelDetailSerializer, description="The model, rolled back.", links=_traffic_links()),
            **errors(401, 403, 404, 409, e409="the model has no version label 'stable' on a READY version"),
        },
    )
    def post(self, request, name: str):
        """Roll the canary back: every unversioned request goes to label
        ``stable`` again (split ``stable`` 100, ``canary`` 0; labels stay).
        Audited (``traffic.rollback``)."""
        actions.rollback_canary(request.user, self.token, name)
        return Response(self.model_body(name))
