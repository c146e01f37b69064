"""The identity provider's access tokens on the management API (for
companies that issue workload identities, as Kubernetes or a CI system
does): a JWT signed with one of the issuer's keys (its JWKS, fetched and
cached by PyJWT's PyJWKClient), issued by OIDC_ISSUER for OIDC_API_AUDIENCE
(default OIDC_CLIENT_ID), not expired (RFC 9068's checks). Whom it stands
for: :func:`models_store.accounts.services.provider_token_user`."""

from __future__ import annotations

import threading

import jwt
from django.conf import settings

from models_store.accounts.oidc import discovery

#: Asymmetric algorithms only: a JWT "signed" with a shared secret or none is never the provider's.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")

_lock = threading.Lock()


class TokenRefused(Exception):
    """Not a valid access token of the identity provider (401)."""


class KeysUnavailable(Exception):
    """The identity provider's keys cannot be read (503)."""


_clients: dict[str, jwt.PyJWKClient] = {}


def looks_like_jwt(value: str) -> bool:
    """Three base64url parts: a JWT, not one of our ``mh_`` tokens."""
    return value.count(".") == 2 and not value.startswith("mh_")


def _keys(uri: str) -> jwt.PyJWKClient:
    with _lock:
        if uri not in _clients:
            _clients[uri] = jwt.PyJWKClient(uri, cache_keys=True, lifespan=300, timeout=int(settings.OIDC_TIMEOUT))
        return _clients[uri]


def validate(token: str) -> dict:
    """The claims of a provider's access token; TokenRefused or KeysUnavailable."""
    try:
        document = discovery.document()
        key = _keys(document["jwks_uri"]).get_signing_key_from_jwt(token)
    except (discovery.DiscoveryFailed, KeyError, jwt.PyJWKClientConnectionError) as exc:
        raise KeysUnavailable(f"cannot read the identity provider's keys: {exc}") from None
    except jwt.PyJWTError as exc:
        raise TokenRefused(f"not an access token of the identity provider: {exc}") from None
    try:
        return jwt.decode(
            token,
            key.key,
            algorithms=list(ALGORITHMS),
            audience=settings.OIDC_API_AUDIENCE,
            issuer=document["issuer"],
            options={"require": ["iss", "sub", "aud", "exp"]},
            leeway=30,
        )
    except jwt.PyJWTError as exc:
        raise TokenRefused(f"the identity provider's token is refused: {exc}") from None
