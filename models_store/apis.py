"""The management API (DRF): models, model versions, uploads, version labels,
version policies and the audit log.

Authentication: ``Authorization: Bearer <API token>`` (scripts) or the web
UI's session (with CSRF). Errors: ``{"error": "..."}`` with 400 (refused),
401, 403 (not your team's model), 404, 409 (same bytes uploaded twice), 413
(above MAX_UPLOAD_BYTES), 422 (the upload failed validation; the FAILED
version is kept with its reason); malformed fields get DRF's field errors.
"""

from __future__ import annotations

import logging

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, MultiPartParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from models_store import actions, openapi, selectors, uploads  # noqa: F401 (openapi: the token scheme)
from models_store.authentication import BearerTokenAuthentication
from models_store.models import ApiToken, ModelVersion
from models_store.serializers import (
    AuditEventSerializer,
    ErrorSerializer,
    LabelSerializer,
    ModelDetailSerializer,
    ModelSerializer,
    ModelUpdateSerializer,
    UploadSerializer,
    VersionSerializer,
)

logger = logging.getLogger(__name__)

ERRORS = {code: OpenApiResponse(ErrorSerializer) for code in (400, 401, 403, 404)}


def api_exception_handler(exc, context) -> Response:
    """Action errors and DRF's own as ``{"error": ...}``; field errors stay
    DRF's ``{"field": ["..."]}``; anything unexpected is logged, answered 500."""
    code = actions.http_status(exc)
    if code is not None:
        return Response({"error": str(exc)}, status=code)
    response = drf_exception_handler(exc, context)
    if response is None:
        logger.exception("unexpected error in the management API", exc_info=exc)
        return Response({"error": f"internal error ({type(exc).__name__}); see the server log"}, status=500)
    if isinstance(response.data, dict) and set(response.data) == {"detail"}:
        response.data = {"error": str(response.data["detail"])}
    return response


class ManagementView(APIView):
    # The session is the web UI's (its scripts call the API); DRF enforces CSRF for it.
    authentication_classes = [BearerTokenAuthentication, SessionAuthentication]
    permission_classes = [IsAuthenticated]
    renderer_classes = [JSONRenderer]
    parser_classes = [JSONParser]

    def get_exception_handler(self):
        return api_exception_handler

    @property
    def token(self) -> ApiToken | None:
        auth = self.request.auth
        return auth if isinstance(auth, ApiToken) else None


class ModelListView(ManagementView):
    @extend_schema(responses={200: ModelSerializer(many=True), 401: ERRORS[401]})
    def get(self, request):
        """Every model with its team, version policy, served versions, labels and versions."""
        return Response(ModelSerializer(selectors.model_overview(), many=True).data)


def _model_body(name: str) -> dict:
    model = selectors.model_detail(name)
    if model is None:
        raise actions.NotFound(f"unknown model '{name}'")
    return ModelDetailSerializer(model).data


class ModelDetailView(ManagementView):
    @extend_schema(responses={200: ModelDetailSerializer, **ERRORS})
    def get(self, request, name: str):
        """One model with every version in full (signature, state, reason, validation log)."""
        return Response(_model_body(name))

    @extend_schema(request=ModelUpdateSerializer, responses={200: ModelDetailSerializer, **ERRORS})
    def patch(self, request, name: str):
        """Change the description, the version policy (``latest`` N, ``all``,
        ``specific`` versions) and/or the instance group. A policy that would
        serve no READY version is refused."""
        serializer = ModelUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        description = data.pop("description", None)
        groups = data.pop("instance_group", None)
        groups = [dict(g) for g in groups] if groups is not None else None
        actions.update_model(
            request.user, self.token, name, description=description, policy=data, instance_group=groups
        )
        return Response(_model_body(name))


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

    @extend_schema(responses={200: VersionSerializer(many=True), **ERRORS})
    def get(self, request, name: str):
        model = selectors.model_detail(name)
        if model is None:
            raise actions.NotFound(f"unknown model '{name}'")
        return Response(VersionSerializer(model.versions.all(), many=True).data)

    @extend_schema(
        request={"multipart/form-data": UploadSerializer},
        responses={
            201: OpenApiResponse(VersionSerializer, description="validated: READY"),
            202: OpenApiResponse(VersionSerializer, description="accepted; validation runs in a worker"),
            409: OpenApiResponse(ErrorSerializer, description="the model already has these bytes"),
            413: OpenApiResponse(ErrorSerializer, description="above MAX_UPLOAD_BYTES"),
            422: OpenApiResponse(description="validation failed: {error, version}"),
            **ERRORS,
        },
    )
    def post(self, request, name: str):
        """Upload an ONNX file as the next version of model ``name`` (created
        for ``team`` when it does not exist). Validation (ONNX checker, ONNX
        Runtime session, signature, warm-up inference) runs as a task: in the
        embedded mode before this answers (201 READY or 422 FAILED), with a
        worker afterwards (202; poll the version)."""
        actions.check_upload(request.user, self.token, name)
        try:
            data = request.data
        except OSError as exc:
            raise ParseError(f"the upload was interrupted: {exc}") from None
        staged = self.upload_handler.result()
        version = actions.upload(
            request.user, self.token, name, staged, data.get("team", ""), data.get("description", "")
        )
        version.refresh_from_db()
        body = VersionSerializer(version).data
        headers = {"Location": f"/api/models/{name}/versions/{version.number}/"}
        if version.state == ModelVersion.State.FAILED:
            error = f"version {version.number} of '{name}' failed validation: {version.reason}"
            return Response({"error": error, "version": body}, status=422, headers=headers)
        code = status.HTTP_201_CREATED if version.state == ModelVersion.State.READY else status.HTTP_202_ACCEPTED
        return Response(body, status=code, headers=headers)


class VersionDetailView(ManagementView):
    @extend_schema(responses={200: VersionSerializer, **ERRORS})
    def get(self, request, name: str, number: int):
        """One version: state, reason, signature, sha256, size, validation log."""
        version = actions.get_version(actions.get_model(name), number)
        return Response(VersionSerializer(version).data)

    @extend_schema(responses={204: None, **ERRORS})
    def delete(self, request, name: str, number: int):
        """Delete a version, its labels and its artifact (the number is never reused)."""
        actions.delete_version(request.user, self.token, name, number)
        return Response(status=status.HTTP_204_NO_CONTENT)


class VersionRetireView(ManagementView):
    @extend_schema(request=None, responses={200: VersionSerializer, **ERRORS})
    def post(self, request, name: str, number: int):
        """Stop serving a READY version (state UNAVAILABLE); no label may point at it."""
        return Response(VersionSerializer(actions.retire_version(request.user, self.token, name, number)).data)


class VersionRestoreView(ManagementView):
    @extend_schema(request=None, responses={200: VersionSerializer, **ERRORS})
    def post(self, request, name: str, number: int):
        """Serve a retired version again (READY)."""
        return Response(VersionSerializer(actions.restore_version(request.user, self.token, name, number)).data)


class LabelView(ManagementView):
    @extend_schema(request=LabelSerializer, responses={200: ModelDetailSerializer, **ERRORS})
    def put(self, request, name: str, label: str):
        """Point version label ``label`` at a READY version."""
        serializer = LabelSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        actions.set_label(request.user, self.token, name, label, serializer.validated_data["version"])
        return Response(_model_body(name))

    @extend_schema(responses={204: None, **ERRORS})
    def delete(self, request, name: str, label: str):
        """Remove a version label."""
        actions.delete_label(request.user, self.token, name, label)
        return Response(status=status.HTTP_204_NO_CONTENT)


class AuditView(ManagementView):
    @extend_schema(responses={200: AuditEventSerializer(many=True), **ERRORS})
    def get(self, request, name: str):
        """The newest changes of a model (who, what, when), newest first."""
        return Response(AuditEventSerializer(selectors.audit_for_model(actions.get_model(name)), many=True).data)
