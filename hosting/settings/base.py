"""The project's Django settings: where it keeps its files (``VAR_DIR``),
its secret key, the apps and middleware, the database, static files and
logging. ``env`` (django-environ; a ``.env`` file is read too) is the one
reader of the environment the other modules of this package use.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parents[2]

env = environ.Env()
if (BASE_DIR / ".env").exists():
    environ.Env.read_env(BASE_DIR / ".env")

VAR_DIR = Path(env.str("VAR_DIR", default=str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def _secret_key() -> tuple[str, bool]:
    """SECRET_KEY from the environment, else one generated once and kept in
    var/ (then True: a key of this machine only, which worker mode refuses)."""
    if env.str("SECRET_KEY", default=""):
        return env.str("SECRET_KEY"), False
    path = VAR_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip(), True


SECRET_KEY, SECRET_KEY_GENERATED = _secret_key()
DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    "models_store",
    "inference",
    "hosting",  # the composition root: last, once the apps are ready
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Serves /static/ from the apps' static folders (no collectstatic needed);
    # for any other path it is one dict lookup.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Content-Security-Policy (django-csp; CONTENT_SECURITY_POLICY in hosting/settings/web.py).
    "csp.middleware.CSPMiddleware",
    # Sign-in throttling (django-axes): answers a locked-out sign-in with the lockout page.
    "axes.middleware.AxesMiddleware",
    # A dependency down (database, S3, broker) answers the web UI 503 with Retry-After, not 500.
    "models_store.web.middleware.DependencyOutageMiddleware",
]

ROOT_URLCONF = "hosting.urls"
WSGI_APPLICATION = "hosting.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "models_store.web.context_processors.ui",
            ],
        },
    },
]

# DATABASE_URL switches to PostgreSQL, e.g. postgres://postgres@127.0.0.1:5432/test
DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'db.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several processes (HTTP workers, gRPC, imports) share the file: WAL and
    # immediate transactions avoid "database is locked" under concurrent writes.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
else:
    DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("DB_CONN_MAX_AGE", default=60))
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
if env.str("TEST_DATABASE_NAME", default=""):
    # Lets concurrent test runs (e.g. several checkouts) use separate test databases.
    DATABASES["default"]["TEST"] = {"NAME": env.str("TEST_DATABASE_NAME")}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env.str("TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"  # only for `collectstatic`; WhiteNoise serves from the apps' folders
STATIC_ROOT.mkdir(exist_ok=True)
WHITENOISE_USE_FINDERS = True
#: Browser libraries installed from npm by `make venv` (package.json; never copied into the repository).
STATICFILES_DIRS = [("vendor/chart.js", BASE_DIR / "node_modules" / "chart.js" / "dist")]
WHITENOISE_AUTOREFRESH = DEBUG
#: Files served at the site's root (``/favicon.ico``, which browsers ask for on every page without a link).
WHITENOISE_ROOT = BASE_DIR / "hosting" / "public"

LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django": {"level": LOG_LEVEL, "propagate": True},
        # One INFO line per task received and succeeded: noise at inference rates.
        "celery.app.trace": {"level": "WARNING"},
        "celery.worker.strategy": {"level": "WARNING"},
        # django-axes announces its version and settings at every start of every process and command.
        "axes.apps": {"level": "WARNING"},
    },
}
