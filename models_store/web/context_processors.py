"""Template context of the web UI's pages."""

from django.conf import settings


def ui(request) -> dict:
    """``token_required`` (INFERENCE_REQUIRE_TOKEN), ``max_upload_bytes`` (MAX_UPLOAD_BYTES),
    ``sso`` (OIDC_ISSUER is set) and ``local_login`` (LOCAL_LOGIN_ENABLED)."""
    return {
        "token_required": settings.INFERENCE_REQUIRE_TOKEN,
        "max_upload_bytes": settings.MAX_UPLOAD_BYTES,
        "sso": settings.OIDC_ENABLED,
        "local_login": settings.LOCAL_LOGIN_ENABLED,
    }
