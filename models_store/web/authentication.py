"""DRF authentication with personal API tokens: ``Authorization: Bearer <token>``."""

from __future__ import annotations

from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed

from models_store.accounts import selectors, services


class BearerTokenAuthentication(BaseAuthentication):
    """Authenticates ``Authorization: Bearer <token>``; ``request.auth`` is the
    ApiToken. Other schemes are left to the next authentication class; an
    unknown, revoked or expired token, or one of an inactive user, is a 401."""

    keyword = "bearer"

    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        scheme, _, value = header.strip().partition(" ")
        if scheme.lower() != self.keyword:
            return None
        value = value.strip()
        if not value or " " in value:
            raise AuthenticationFailed("malformed Authorization header: use 'Bearer <token>'")
        token = selectors.token_by_secret(value)
        if token is None:
            raise AuthenticationFailed("invalid or revoked API token")
        if token.expired:
            raise AuthenticationFailed(f"API token '{token.name}' expired at {token.expires_at:%Y-%m-%d %H:%M:%S} UTC")
        services.token_touch(token=token)
        return token.user, token

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="modelhost"'
