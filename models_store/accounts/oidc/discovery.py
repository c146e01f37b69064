"""The identity provider's endpoints, from its discovery document
(``$OIDC_ISSUER/.well-known/openid-configuration``, OpenID Connect
Discovery 1.0 section 4), fetched at the first use and kept for the
process; a failed fetch is tried again at the next use."""

from __future__ import annotations

import threading

import requests
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from mozilla_django_oidc.utils import import_from_settings

#: mozilla-django-oidc's setting -> the discovery document's field.
ENDPOINT_SETTINGS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
    "OIDC_OP_LOGOUT_ENDPOINT": "end_session_endpoint",
}

_lock = threading.Lock()
_document: dict | None = None


class DiscoveryFailed(ImproperlyConfigured):
    """The discovery document could not be read, or does not describe OIDC_ISSUER."""


def document() -> dict:
    """The provider's discovery document (fetched once per process).
    Raises DiscoveryFailed when SSO is off, the provider does not answer,
    or its ``issuer`` is not OIDC_ISSUER (section 4.3)."""
    global _document
    if _document is not None:
        return _document
    if not settings.OIDC_ENABLED:
        raise DiscoveryFailed("single sign-on is off (OIDC_ISSUER is empty)")
    url = f"{settings.OIDC_ISSUER}/.well-known/openid-configuration"
    with _lock:
        if _document is None:
            try:
                answer = requests.get(url, timeout=settings.OIDC_TIMEOUT)
                answer.raise_for_status()
                found = answer.json()
            except (requests.RequestException, ValueError) as exc:
                raise DiscoveryFailed(f"cannot read the identity provider's {url}: {exc}") from exc
            if str(found.get("issuer", "")).rstrip("/") != settings.OIDC_ISSUER:
                raise DiscoveryFailed(f"{url} names issuer {found.get('issuer')!r}, not OIDC_ISSUER")
            _document = found
    return _document


def setting(name: str, *default):
    """mozilla-django-oidc's setting ``name``: an endpoint from the discovery
    document, the ID token's algorithm from it, else Django's setting."""
    if name in ENDPOINT_SETTINGS:
        value = document().get(ENDPOINT_SETTINGS[name])
        if value:
            return value
        if default:
            return default[0]
        raise DiscoveryFailed(f"the identity provider's discovery document has no {ENDPOINT_SETTINGS[name]}")
    if name == "OIDC_RP_SIGN_ALGO":
        algorithms = document().get("id_token_signing_alg_values_supported") or [settings.OIDC_RP_SIGN_ALGO]
        return algorithms[0]
    return import_from_settings(name, *default)


def forget() -> None:
    """Drop the document (tests that start another provider)."""
    global _document
    with _lock:
        _document = None
