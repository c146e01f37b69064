"""The sign-in and sign-out routes of single sign-on (mozilla-django-oidc's
views, with the provider's endpoints from discovery): ``/oidc/authenticate/``
sends the browser to the provider (authorization code flow, PKCE S256,
state and nonce), ``/oidc/callback/`` redeems the code and signs the user
in, and the web UI's sign-out ends the provider's session too
(RP-initiated logout with ``id_token_hint``) when the user came through it.
Both sign-in routes answer 404 while single sign-on is off."""

from __future__ import annotations

import logging
from urllib.parse import urlencode

from django.conf import settings
from django.http import Http404, HttpResponse
from django.shortcuts import resolve_url
from django.views.generic import View
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView, OIDCLogoutView

from models_store.accounts.oidc import discovery

logger = logging.getLogger(__name__)


def _unavailable(exc: Exception) -> HttpResponse:
    logger.error("single sign-on: %s", exc)
    return HttpResponse(
        "The identity provider cannot be reached; try again shortly.",
        status=503, content_type="text/plain; charset=utf-8", headers={"Retry-After": "30"},
    )  # fmt: skip


class SignInView(OIDCAuthenticationRequestView):
    """Redirect to the provider's authorization endpoint (503 while it cannot be discovered)."""

    get_settings = staticmethod(discovery.setting)

    def __init__(self, **kwargs):
        View.__init__(self, **kwargs)  # the endpoint is discovered on use, not when the view is built

    def get(self, request):
        if not settings.OIDC_ENABLED:
            raise Http404("single sign-on is off")
        try:
            self.OIDC_OP_AUTH_ENDPOINT = self.get_settings("OIDC_OP_AUTHORIZATION_ENDPOINT")
        except discovery.DiscoveryFailed as exc:
            return _unavailable(exc)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        return super().get(request)


class CallbackView(OIDCAuthenticationCallbackView):
    """Redeem the code, validate the ID token, sign the user in (their groups
    applied); a failure goes back to the sign-in page, which says so."""

    get_settings = staticmethod(discovery.setting)

    def get(self, request):
        if not settings.OIDC_ENABLED:
            raise Http404("single sign-on is off")
        try:
            return super().get(request)
        except discovery.DiscoveryFailed as exc:
            return _unavailable(exc)


class SignOutView(OIDCLogoutView):
    """POST: sign out here, then, for a session that came through the
    provider, at the provider (its end-session page comes back to the sign-in page)."""


def provider_logout_url(request) -> str:
    """Where the browser goes after signing out (OIDC_OP_LOGOUT_URL_METHOD):
    the provider's end-session endpoint with the session's ID token as hint
    and the sign-in page to come back to; the sign-in page itself for a
    local session or a provider without one."""
    here = resolve_url(settings.LOGOUT_REDIRECT_URL)
    id_token = request.session.get("oidc_id_token")
    if not (settings.OIDC_ENABLED and id_token):
        return here
    try:
        end_session = discovery.setting("OIDC_OP_LOGOUT_ENDPOINT", "")
    except discovery.DiscoveryFailed:
        return here
    if not end_session:
        return here
    query = {
        "id_token_hint": id_token,
        "post_logout_redirect_uri": request.build_absolute_uri(here),
        "client_id": settings.OIDC_RP_CLIENT_ID,
    }
    return f"{end_session}?{urlencode(query)}"
