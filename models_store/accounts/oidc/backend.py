"""The sign-in backend of single sign-on: mozilla-django-oidc's
authorization code flow (its views send PKCE's challenge and a nonce, the
backend redeems the code with the verifier) with the provider's endpoints
from discovery, a stricter ID token check, and the user found or created
by the username claim, their teams and roles rewritten from the groups
claim at every sign-in (audited)."""

from __future__ import annotations

import jwt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from models_store.accounts import services
from models_store.accounts.oidc import discovery


def validate_id_token(token: str, key, algorithm: str) -> dict:
    """The claims of an ID token (OpenID Connect Core 1.0, section 3.1.3.7):
    signed with ``key`` by ``algorithm``, issued by OIDC_ISSUER for
    OIDC_CLIENT_ID, not expired; SuspiciousOperation otherwise."""
    try:
        return jwt.decode(
            token,
            key,
            algorithms=[algorithm],
            audience=settings.OIDC_RP_CLIENT_ID,
            issuer=discovery.document()["issuer"],
            options={"require": ["iss", "sub", "aud", "exp", "iat"]},
            leeway=30,
        )
    except jwt.PyJWTError as exc:
        raise SuspiciousOperation(f"ID token refused: {exc}") from None


class ProviderBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend with discovery, ID token validation
    (:func:`validate_id_token`) and users by the username claim."""

    def __init__(self, *args, **kwargs):
        # The endpoints are read on use (discovery), never when Django walks the
        # backends for a local sign-in: a provider that is down leaves that one working.
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_IDP_SIGN_KEY = None
        self.UserModel = get_user_model()

    get_settings = staticmethod(discovery.setting)

    @property
    def OIDC_OP_TOKEN_ENDPOINT(self):
        return discovery.setting("OIDC_OP_TOKEN_ENDPOINT")

    @property
    def OIDC_OP_USER_ENDPOINT(self):
        return discovery.setting("OIDC_OP_USER_ENDPOINT")

    @property
    def OIDC_OP_JWKS_ENDPOINT(self):
        return discovery.setting("OIDC_OP_JWKS_ENDPOINT")

    @property
    def OIDC_RP_SIGN_ALGO(self):
        return discovery.setting("OIDC_RP_SIGN_ALGO")

    def authenticate(self, request, **kwargs):
        if not settings.OIDC_ENABLED or request is None or "code" not in request.GET:
            return None
        return super().authenticate(request, **kwargs)

    def _verify_jws(self, payload, key):
        """The ID token's claims: signature, issuer, audience and expiry checked."""
        header = jwt.get_unverified_header(payload)
        if header.get("alg") != self.OIDC_RP_SIGN_ALGO:
            raise SuspiciousOperation(f"ID token signed with {header.get('alg')!r}, not {self.OIDC_RP_SIGN_ALGO}")
        return validate_id_token(payload, key, self.OIDC_RP_SIGN_ALGO)

    def verify_claims(self, claims) -> bool:
        return bool(claims.get(settings.OIDC_USERNAME_CLAIM))

    def filter_users_by_claims(self, claims):
        return self.UserModel.objects.filter(username=services.provider_username(claims=claims))

    def get_user(self, user_id):
        """The session's user, unless deactivated since (Django's ModelBackend
        checks this too; mozilla-django-oidc's does not): a deactivated
        person's sessions end at their next request."""
        user = super().get_user(user_id)
        return user if user is not None and user.is_active else None

    def get_or_create_user(self, access_token, id_token, payload):
        """The user of the sign-in: the ID token's claims with the userinfo
        answer's over them (the groups claim may be in either)."""
        claims = dict(payload)
        claims.update(self.get_userinfo(access_token, id_token, payload) or {})
        if claims.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("the userinfo answer names another subject than the ID token")
        return services.user_for_provider_claims(claims=claims)
