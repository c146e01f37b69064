"""OpenAPI (drf-spectacular) pieces of the management API: its bearer token
scheme, and a hook that keeps the inference protocols out of the schema
(they follow their own specifications, see the README)."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension

API_PREFIX = "/api/"


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "models_store.authentication.BearerTokenAuthentication"
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
