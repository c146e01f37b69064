"""Single sign-on with OpenID Connect (mozilla-django-oidc; docs/sso.md):
the web UI's sign-in through the company's identity provider (authorization
code flow with PKCE), teams and roles from its groups claim, and the
management API's acceptance of its access tokens (JWTs). Off unless
OIDC_ISSUER is set: the embedded default (``make run``) needs no provider.
The provider's endpoints are discovered from
``$OIDC_ISSUER/.well-known/openid-configuration`` at the first sign-in
(:mod:`models_store.accounts.oidc.discovery`), not here: a provider that is
down never stops the server from starting. The sign-in backends and the
Content-Security-Policy that follow from these: :mod:`.web`.
"""

from __future__ import annotations

from hosting.settings.base import env

#: The identity provider's issuer URL, e.g. https://keycloak.example.com/realms/company (empty: no SSO).
OIDC_ISSUER = env.str("OIDC_ISSUER", default="").rstrip("/")
OIDC_ENABLED = bool(OIDC_ISSUER)
#: This server's client at the provider (a confidential client; PKCE is used as well).
OIDC_RP_CLIENT_ID = env.str("OIDC_CLIENT_ID", default="")
OIDC_RP_CLIENT_SECRET = env.str("OIDC_CLIENT_SECRET", default="")
#: Scopes asked for at sign-in (space-separated); the groups claim may need its own scope (Keycloak, Dex: "groups").
OIDC_RP_SCOPES = env.str("OIDC_SCOPES", default="openid email profile")
#: The claim (of the ID token or the userinfo answer) that lists the user's groups.
OIDC_GROUPS_CLAIM = env.str("OIDC_GROUPS_CLAIM", default="groups")
#: The claim that names the user (their username here): preferred_username, email, upn, sub, ...
OIDC_USERNAME_CLAIM = env.str("OIDC_USERNAME_CLAIM", default="preferred_username")
#: Groups -> teams and roles: "group=team:role,..." (role viewer, maintainer or owner; "group=operator"
#: makes the platform's operators) or a JSON object {"group": "team:role" or ["team:role", ...]}.
OIDC_GROUP_MAP = env.str("OIDC_GROUP_MAP", default="")
#: The audience the management API requires of the provider's access tokens (empty: OIDC_CLIENT_ID).
OIDC_API_AUDIENCE = env.str("OIDC_API_AUDIENCE", default="") or OIDC_RP_CLIENT_ID
#: Seconds the provider may take to answer (discovery, token, userinfo, keys).
OIDC_TIMEOUT = env.float("OIDC_TIMEOUT_SECONDS", default=10.0)
#: Whether people may sign in with a local password (the web UI, the admin): off leaves SSO only.
LOCAL_LOGIN_ENABLED = env.bool("LOCAL_LOGIN_ENABLED", default=True)

# mozilla-django-oidc: authorization code flow with PKCE (S256) and a nonce; the ID token is kept
# in the session for the provider's sign-out (id_token_hint); users are created at their first sign-in.
OIDC_USE_PKCE = True
OIDC_PKCE_CODE_CHALLENGE_METHOD = "S256"
OIDC_USE_NONCE = True
OIDC_STORE_ID_TOKEN = True
OIDC_CREATE_USER = True
OIDC_RP_SIGN_ALGO = "RS256"  # replaced at discovery by the provider's first ID token algorithm
OIDC_OP_LOGOUT_URL_METHOD = "models_store.accounts.oidc.views.provider_logout_url"
LOGIN_REDIRECT_URL_FAILURE = "/accounts/login/?sso=failed"
