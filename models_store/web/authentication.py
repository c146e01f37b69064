"""DRF authentication of the management API: ``Authorization: Bearer <token>``
with an API token (``mh_...``: a person's or a service account's) or, with
single sign-on on, an access token of the identity provider (a JWT)."""

from __future__ import annotations

from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import APIException, AuthenticationFailed

from models_store.accounts import selectors, services


class ProviderUnavailable(APIException):
    status_code = 503
    default_detail = "the identity provider's keys cannot be read; try again shortly"


class BearerTokenAuthentication(BaseAuthentication):
    """Authenticates ``Authorization: Bearer <token>``; ``request.auth`` is the
    ApiToken (None for the identity provider's access token: its user's
    roles apply). Other schemes are left to the next authentication class; an
    unknown, revoked or expired token, or one of an inactive user, is a 401;
    the provider's keys out of reach a 503."""

    keyword = "bearer"

    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        scheme, _, value = header.strip().partition(" ")
        if scheme.lower() != self.keyword:
            return None
        value = value.strip()
        if not value or " " in value:
            raise AuthenticationFailed("malformed Authorization header: use 'Bearer <token>'")
        provider_user = self._provider_user(value)
        if provider_user is not None:
            return provider_user, None
        token = selectors.token_by_secret(value)
        if token is None:
            raise AuthenticationFailed("invalid or revoked API token")
        if token.expired:
            raise AuthenticationFailed(f"API token '{token.name}' expired at {token.expires_at:%Y-%m-%d %H:%M:%S} UTC")
        services.token_touch(token=token)
        return token.user, token

    @staticmethod
    def _provider_user(value: str):
        try:
            return services.provider_token_user(token=value)
        except services.ProviderTokenRefused as exc:
            raise AuthenticationFailed(str(exc)) from None
        except services.ProviderKeysUnavailable as exc:
            raise ProviderUnavailable(str(exc)) from None

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="modelhost"'
