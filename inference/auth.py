"""Access control for inference, shared by every transport.

Adapters pass the bearer token they received (REST ``Authorization: Bearer
<token>``; gRPC metadata key ``authorization`` with the same value) and the
model name to :func:`authorize` before calling the DataPlane. With
``INFERENCE_REQUIRE_TOKEN`` off (the default) it does nothing. With it on,
the configured checker decides: ``INFERENCE_TOKEN_CHECKER`` names a callable
``(token: str | None, model_name: str) -> None`` that raises
Unauthenticated or PermissionDenied (the model store provides it).
"""

from __future__ import annotations

from django.conf import settings
from django.utils.module_loading import import_string

from inference.protocol.errors import Unauthenticated

_checker = None


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` value, or None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def authorize(token: str | None, model_name: str) -> None:
    """Raise Unauthenticated / PermissionDenied unless ``token`` may call
    ``model_name``; a no-op while INFERENCE_REQUIRE_TOKEN is off."""
    if not settings.INFERENCE_REQUIRE_TOKEN:
        return
    global _checker
    if _checker is None:
        path = getattr(settings, "INFERENCE_TOKEN_CHECKER", "")
        if not path:
            raise Unauthenticated("inference requires a token, but no INFERENCE_TOKEN_CHECKER is configured")
        _checker = import_string(path)
    _checker(token, model_name)
