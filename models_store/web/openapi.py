"""OpenAPI (drf-spectacular) pieces of the management API: its bearer token
scheme, the schema class of its views (path parameter patterns, the
``WWW-Authenticate`` header of a 401, OpenAPI links between operations), the
error responses, and a hook that keeps the inference protocols out of the
schema (they follow their own specifications, see docs/v2-rest.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import force_instance, is_serializer
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers
from uritemplate import variables

from models_store.identifiers import MAX_ROW_ID, MAX_VERSION_NUMBER, MODEL_NAME_RE, label_validator, team_name_validator
from models_store.web.fields import ErrorSerializer

API_PREFIX = "/api/"


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "models_store.web.authentication.BearerTokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A personal API token (web UI: API tokens): Authorization: Bearer <token>",
        }


def only_management_api(endpoints):
    """Preprocessing hook: the endpoints under /api/ only."""
    return [endpoint for endpoint in endpoints if endpoint[0].startswith(API_PREFIX)]


#: The path parameters of the management API, as the registry accepts them.
PATH_PARAMETERS = {
    "name": OpenApiParameter("name", str, OpenApiParameter.PATH, pattern=MODEL_NAME_RE, description="Model name."),
    "number": OpenApiParameter(
        "number",
        {"type": "integer", "minimum": 1, "maximum": MAX_VERSION_NUMBER},
        OpenApiParameter.PATH,
        description="Model version number.",
    ),
    "label": OpenApiParameter(
        "label", str, OpenApiParameter.PATH, pattern=label_validator.regex.pattern, description="Version label."
    ),
    "team": OpenApiParameter(
        "team", str, OpenApiParameter.PATH, pattern=team_name_validator.regex.pattern, description="Team name."
    ),
    "webhook": OpenApiParameter(
        "webhook",
        {"type": "integer", "minimum": 1, "maximum": MAX_ROW_ID},
        OpenApiParameter.PATH,
        description="Webhook subscription id.",
    ),
    "username": OpenApiParameter(
        "username", str, OpenApiParameter.PATH, pattern=r"^[\w.@+-]{1,150}$", description="A user's username."
    ),
    "account": OpenApiParameter(
        "account",
        {"type": "integer", "minimum": 1, "maximum": MAX_ROW_ID},
        OpenApiParameter.PATH,
        description="Service account id.",
    ),
    "token_id": OpenApiParameter(
        "token_id",
        {"type": "integer", "minimum": 1, "maximum": MAX_ROW_ID},
        OpenApiParameter.PATH,
        description="API token id.",
    ),
    "delivery": OpenApiParameter(
        "delivery",
        {"type": "integer", "minimum": 1, "maximum": MAX_ROW_ID},
        OpenApiParameter.PATH,
        description="Webhook delivery id.",
    ),
    "rollout": OpenApiParameter(
        "rollout",
        {"type": "integer", "minimum": 1, "maximum": MAX_ROW_ID},
        OpenApiParameter.PATH,
        description="Rollout id.",
    ),
}

#: DRF names the scheme of a 401 (``Bearer realm="modelhost"``).
WWW_AUTHENTICATE = OpenApiParameter(
    "WWW-Authenticate",
    str,
    OpenApiParameter.HEADER,
    response=[401],
    required=True,
    description='The authentication scheme to use: Bearer realm="modelhost".',
)


@dataclass(frozen=True)
class OpenApiLink:
    """An OpenAPI link: how a value of this response feeds the parameters
    of another operation (``$request.path.name``, ``$response.body#/number``)."""

    name: str
    operation_id: str
    parameters: dict[str, str] = field(default_factory=dict)
    request_body: dict | None = None
    description: str = ""

    def as_schema(self) -> dict:
        link: dict = {"operationId": self.operation_id, "parameters": dict(self.parameters)}
        if self.request_body is not None:
            link["requestBody"] = self.request_body
        if self.description:
            link["description"] = self.description
        return link


class LinkedResponse(OpenApiResponse):
    """An :class:`OpenApiResponse` with OpenAPI links to the operations its
    answer feeds."""

    def __init__(self, response=None, description: str = "", links: tuple[OpenApiLink, ...] = (), examples=None):
        super().__init__(response, description, examples)
        self.links = links


class ManagementAutoSchema(AutoSchema):
    """drf-spectacular's AutoSchema for the management API: every path
    parameter with the pattern or bounds the registry enforces, the
    ``WWW-Authenticate`` header of every 401, and the links of
    :class:`LinkedResponse` answers."""

    def get_override_parameters(self):
        path_parameters = [PATH_PARAMETERS[name] for name in variables(self.path) if name in PATH_PARAMETERS]
        return [*path_parameters, WWW_AUTHENTICATE, *super().get_override_parameters()]

    def _get_request_for_media_type(self, serializer, direction="request"):
        """drf-spectacular's request body, also required when its schema is ``oneOf`` branches (or an
        ``allOf`` of them) that each require a field (an upload: a file or an ensemble's config), though no
        field is required alone."""
        schema, required = super()._get_request_for_media_type(serializer, direction)
        if not required and is_serializer(serializer):
            component = self.resolve_serializer(force_instance(serializer), direction)
            schema_ = component.schema if component else {}
            branches = [b for part in [schema_, *schema_.get("allOf", [])] for b in part.get("oneOf", [])]
            required = bool(branches) and all(branch.get("required") for branch in branches)
        return schema, required

    # drf-spectacular (0.30) has no links of its own: the response object it
    # builds for a status code gets the LinkedResponse's links added.
    def _get_response_for_code(self, serializer, status_code, media_types=None, direction="response"):
        response = super()._get_response_for_code(serializer, status_code, media_types, direction)
        links = getattr(serializer, "links", ())
        if links:
            response["links"] = {link.name: link.as_schema() for link in links}
        return response


ERROR_MEANINGS = {
    400: "malformed request: invalid fields (listed in `fields`), a body that is not JSON, an upload that is "
    "not an ONNX model with exactly the data files it references",
    401: "no API token, or an unknown or revoked one",
    403: "your role in the model's (or the team's) team does not allow it (see docs/teams-and-tokens.md), "
    "or the web UI session's CSRF token is missing",
    404: "no such model, version, version label or team",
    409: "refused by the registry's current state",
    413: "the file is above MAX_UPLOAD_BYTES",
    415: "the body's media type is not accepted",
}


def errors(*codes: int, **meanings: str) -> dict[int, OpenApiResponse]:
    """The error responses ``codes`` of an operation, each the one error
    shape (:class:`~models_store.web.fields.ErrorSerializer`); ``meanings``
    (``e409="..."``) say what a status means for this operation."""
    return {
        code: OpenApiResponse(ErrorSerializer, description=meanings.get(f"e{code}", ERROR_MEANINGS[code]))
        for code in codes
    }


_PAGES: dict[str, type[serializers.Serializer]] = {}


def paginated(item: type[serializers.Serializer]) -> type[serializers.Serializer]:
    """The schema of a page of ``item`` as :class:`models_store.web.pagination.ListPage`
    answers it: ``count`` (the total), ``next`` and ``previous`` (URLs or null), ``results``."""
    base = item.__name__.removesuffix("Serializer")
    name = f"Paginated{base}ListSerializer"
    if name not in _PAGES:
        fields = {
            "count": serializers.IntegerField(help_text="How many items the whole list has."),
            "next": serializers.URLField(allow_null=True, help_text="The next page, or null on the last."),
            "previous": serializers.URLField(allow_null=True, help_text="The previous page, or null on the first."),
            "results": item(many=True),
            "__doc__": f"A page of {base} items.",
        }
        _PAGES[name] = type(name, (serializers.Serializer,), fields)
    return _PAGES[name]
