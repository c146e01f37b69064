"""The management API's model versions: a model's versions (and uploads of
new ones: :func:`models_store.intake.services.upload`), one version,
retire, restore, delete, promote a held version."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import ParseError
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response

from models_store import outages
from models_store.intake import services as intake
from models_store.registry import actions
from models_store.registry.api import base
from models_store.registry.models import ModelVersion
from models_store.registry.serializers import UploadFailedSerializer, UploadSerializer, VersionSerializer
from models_store.web.api import PAGE_PARAMETERS
from models_store.web.openapi import LinkedResponse, OpenApiLink, errors, paginated

UPLOADED_LINKS = (
    *base.version_links("$request.path.name", "$response.body#/number"),
    OpenApiLink("GetModel", base.GET_MODEL, {"name": "$request.path.name"}, description="The model of the version."),
    OpenApiLink(
        "SetLabel",
        base.SET_LABEL,
        {"name": "$request.path.name"},
        request_body={"version": "$response.body#/number"},
        description="Point a version label at the version (once it is READY).",
    ),
)


FORCE = "Even if the default route would then serve a version that breaks its callers (audited as forced)."
GUARDED = (
    "the default route would then serve a version whose signature breaks its callers "
    "(see differences; ?force=true to do it anyway)"
)


class VersionListView(base.RegistryView):
    permission_actions = {"GET": "model.view", "POST": "version.upload"}  # models_store.accounts.permissions

    """GET: the versions of a model. POST: upload a new version (multipart)."""

    parser_classes = [MultiPartParser]

    def initialize_request(self, request, *args, **kwargs):
        self.upload_handler = intake.receive(request=request) if request.method == "POST" else None
        return super().initialize_request(request, *args, **kwargs)

    def dispatch(self, request, *args, **kwargs):
        try:
            return super().dispatch(request, *args, **kwargs)
        finally:
            if self.upload_handler is not None:
                self.upload_handler.discard()

    @extend_schema(
        operation_id=base.LIST_VERSIONS,
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
        operation_id=base.UPLOAD_VERSION,
        request={"multipart/form-data": UploadSerializer},
        responses={
            201: LinkedResponse(VersionSerializer, description="Validated: READY.", links=UPLOADED_LINKS),
            202: LinkedResponse(
                VersionSerializer,
                description=(
                    "Accepted: stored, validated off the request (a worker, or this server's background thread for "
                    "a file above VALIDATE_IN_REQUEST_MAX_BYTES). The version is UPLOADED (VALIDATING while it "
                    "runs): poll the URL in Location until READY, or FAILED with the reason; its log says where it "
                    "waits or runs."
                ),
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
        a task: in the embedded mode before this answers for a file up to
        VALIDATE_IN_REQUEST_MAX_BYTES (201 READY or 422 FAILED), else
        afterwards (202 UPLOADED: poll the version at ``Location``); the
        request then reads nothing of the model, so it answers as soon as
        the file is stored."""
        intake.check_upload(user=request.user, token=self.token, model_name=name)
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
        version = intake.upload(
            user=request.user, token=self.token, model_name=name, staged=staged, team_name=team,
            description=description, config=config,
        )  # fmt: skip
        version.refresh_from_db()
        body = VersionSerializer(version).data
        headers = {"Location": f"/api/models/{name}/versions/{version.number}/"}
        if version.state == ModelVersion.State.FAILED:
            error = f"version {version.number} of '{name}' failed validation: {version.reason}"
            return Response({"error": error, "version": body}, status=422, headers=headers)
        code = status.HTTP_201_CREATED if version.state == ModelVersion.State.READY else status.HTTP_202_ACCEPTED
        return Response(body, status=code, headers=headers)


class VersionDetailView(base.RegistryView):
    permission_actions = {"GET": "model.view", "DELETE": "version.delete"}  # models_store.accounts.permissions

    @extend_schema(operation_id=base.GET_VERSION, responses={200: VersionSerializer, **errors(401, 404)})
    def get(self, request, name: str, number: int):
        """One version: state, reason, signature, sha256, size, validation log."""
        version = actions.get_version(self.visible(name), number)
        return Response(VersionSerializer(version).data)

    @extend_schema(
        operation_id=base.DELETE_VERSION,
        parameters=[base.force_parameter(FORCE)],
        responses={
            204: None,
            **errors(
                400, 401, 403, 404, 409,
                e409="the traffic split sends requests to a version label on the version, or " + GUARDED,
            ),
        },
    )  # fmt: skip
    def delete(self, request, name: str, number: int):
        """Delete a version, its labels and its artifact (the number is never
        reused). Refused (409, naming the split) while the model's traffic
        split sends requests to a label on it; a label on it the split gives
        weight 0 leaves the split (audited ``traffic.set``). Refused (409,
        ``differences``) when the default route would then serve a version
        that breaks its callers, unless ``?force=true``."""
        actions.delete_version(request.user, self.token, name, number, force=base.query_force(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class VersionRetireView(base.RegistryView):
    permission_actions = {"POST": "version.retire"}  # models_store.accounts.permissions

    @extend_schema(
        operation_id=base.RETIRE_VERSION,
        request=None,
        parameters=[base.force_parameter(FORCE)],
        responses={
            200: LinkedResponse(
                VersionSerializer,
                description="The retired version (UNAVAILABLE).",
                links=base.version_links("$request.path.name", "$response.body#/number", only=("RestoreVersion",)),
            ),
            **errors(
                400, 401, 403, 404, 409, e409="the version is not READY, or a version label points at it, or " + GUARDED
            ),
        },
    )
    def post(self, request, name: str, number: int):
        """Stop serving a READY version (state UNAVAILABLE); no label may
        point at it. Refused (409, ``differences``) when the default route
        would then serve a version that breaks its callers, unless ``?force=true``."""
        retired = actions.retire_version(request.user, self.token, name, number, force=base.query_force(request))
        return Response(VersionSerializer(retired).data)


class VersionRestoreView(base.RegistryView):
    permission_actions = {"POST": "version.restore"}  # models_store.accounts.permissions

    @extend_schema(
        operation_id=base.RESTORE_VERSION,
        request=None,
        responses={
            200: LinkedResponse(
                VersionSerializer,
                description="The version, READY again.",
                links=base.version_links("$request.path.name", "$response.body#/number", only=("RetireVersion",)),
            ),
            **errors(401, 403, 404, 409, e409="the version is not retired (UNAVAILABLE)"),
        },
    )
    def post(self, request, name: str, number: int):
        """Serve a retired version again (READY; held when its signature
        would break the default route's callers: ``held``, ``reason``)."""
        return Response(VersionSerializer(actions.restore_version(request.user, self.token, name, number)).data)


class VersionPromoteView(base.RegistryView):
    permission_actions = {"POST": "version.promote"}  # models_store.accounts.permissions

    @extend_schema(
        operation_id=base.PROMOTE_VERSION,
        request=None,
        parameters=[base.force_parameter("Promote even though the default route's callers would break.")],
        responses={
            200: LinkedResponse(
                VersionSerializer,
                description="The version, no longer held: the version policy may choose it.",
                links=base.version_links("$request.path.name", "$response.body#/number", only=("RetireVersion",)),
            ),
            **errors(
                400, 401, 403, 404, 409,
                e409="the version is not held, or it would break the default route's callers (see differences; "
                "?force=true to do it anyway)",
            ),
        },
    )  # fmt: skip
    def post(self, request, name: str, number: int):
        """Release a held version (``held``: READY, kept from the version
        policy's choice because its signature would break the callers of the
        default route): under a ``latest`` policy it becomes the default.
        Audited ``version.promote`` (``forced`` with the differences)."""
        promoted = actions.promote_version(request.user, self.token, name, number, force=base.query_force(request))
        return Response(VersionSerializer(promoted).data)
