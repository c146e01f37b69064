"""The web UI and the management API: signing in (django-axes throttling),
sessions and cookies, uploads, Django REST framework and the OpenAPI schema."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlsplit

from hosting.settings.base import env
from hosting.settings.sso import LOCAL_LOGIN_ENABLED, OIDC_ENABLED, OIDC_ISSUER

# --- Sign-in throttling (django-axes) ------------------------------------------
# AxesStandaloneBackend comes first: a locked-out account or address is refused
# before ModelBackend computes the (deliberately slow) password hash.
# Local passwords unless LOCAL_LOGIN_ENABLED is off; the identity provider when OIDC_ISSUER is set (.sso).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    *(["django.contrib.auth.backends.ModelBackend"] if LOCAL_LOGIN_ENABLED else []),
    *(["models_store.accounts.oidc.backend.ProviderBackend"] if OIDC_ENABLED else []),
]
#: Failed sign-ins (web UI, admin) after which an account, or a client address, is locked out.
AXES_FAILURE_LIMIT = env.int("SIGN_IN_FAILURE_LIMIT", default=5)
#: How long a lockout lasts (a new failure during it starts it again), seconds.
AXES_COOLOFF_TIME = timedelta(seconds=env.int("SIGN_IN_LOCKOUT_SECONDS", default=15 * 60))
#: What is counted and locked out, each on its own: the account and the client address
#: (REMOTE_ADDR; behind a reverse proxy every client has the proxy's: set "username").
AXES_LOCKOUT_PARAMETERS = env.list("SIGN_IN_LOCKOUT_PARAMETERS", default=["username", "ip_address"])
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_HTTP_RESPONSE_CODE = 429

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# --- The web UI --------------------------------------------------------------
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "model-list"
LOGOUT_REDIRECT_URL = "login"
#: Set SECURE_COOKIES=true behind HTTPS: session and CSRF cookies are then sent over HTTPS only.
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env.bool("SECURE_COOKIES", default=False)
CSRF_COOKIE_HTTPONLY = True  # the pages' scripts read the token from the form, not the cookie
SESSION_COOKIE_AGE = env.int("SESSION_COOKIE_AGE", default=12 * 3600)
#: Origins (scheme://host[:port]) trusted for CSRF behind a proxy, e.g. https://models.example.com
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
#: Content-Security-Policy of the web UI, the admin and the management API (django-csp): scripts,
#: styles, fonts and fetches from this origin only (no inline script or style: the templates have
#: none, the API docs page uses its own template), images also as data: URIs (Swagger UI's icons);
#: no plugin, no <base>, forms post here, and no page may be framed (frame-ancestors 'none').
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        # With single sign-on, the sign-out form's redirect goes on to the provider's end-session page.
        "form-action": ["'self'", *(["{0.scheme}://{0.netloc}".format(urlsplit(OIDC_ISSUER))] if OIDC_ENABLED else [])],
        "frame-ancestors": ["'none'"],
    }
}
#: Largest model file accepted by an upload (web UI and management API), in bytes.
MAX_UPLOAD_BYTES = env.int("MAX_UPLOAD_BYTES", default=1024 * 1024 * 1024)
# Request bodies are bounded by MAX_REQUEST_BYTES in the inference views,
# which answer with a protocol error; Django's own cap would answer 400 HTML.
DATA_UPLOAD_MAX_MEMORY_SIZE = None

REST_FRAMEWORK = {
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "modelhost management API",
    "DESCRIPTION": "Models, model versions, version labels and version policies of the model store. "
    "Authenticate with 'Authorization: Bearer <API token>' (create tokens on the web UI's Tokens page).",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "PREPROCESSING_HOOKS": ["models_store.web.openapi.only_management_api"],
    # Two choice sets named "state": the versions' keep the name they had before webhooks came.
    "ENUM_NAME_OVERRIDES": {
        "StateEnum": "models_store.models.ModelVersion.State",
        "DeliveryStateEnum": "models_store.models.WebhookDelivery.State",
        "WebhookEventEnum": "models_store.models.WebhookEvent",
        "RoleEnum": "models_store.models.Role",
    },
}
