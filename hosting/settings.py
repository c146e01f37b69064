"""Settings, read from the environment (django-environ) with safe defaults for
the embedded mode: SQLite and the model store under ``var/``, ONNX Runtime in
process. The variables are listed in docs/configuration.md (worker mode's in
docs/worker-mode.md).
"""

from __future__ import annotations

import secrets
from datetime import timedelta
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

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
    # Content-Security-Policy (django-csp; CONTENT_SECURITY_POLICY below).
    "csp.middleware.CSPMiddleware",
    # Sign-in throttling (django-axes): answers a locked-out sign-in with the lockout page.
    "axes.middleware.AxesMiddleware",
    # A dependency down (database, S3, broker) answers the web UI 503 with Retry-After, not 500.
    "models_store.middleware.DependencyOutageMiddleware",
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
                "models_store.context_processors.ui",
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

# --- Sign-in throttling (django-axes) ------------------------------------------
# AxesStandaloneBackend comes first: a locked-out account or address is refused
# before ModelBackend computes the (deliberately slow) password hash.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
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
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}
#: Largest model file accepted by an upload (web UI and management API), in bytes.
MAX_UPLOAD_BYTES = env.int("MAX_UPLOAD_BYTES", default=1024 * 1024 * 1024)
#: Team given to models imported from a repository directory (serve --model-repository,
#: import_repository) that have none; empty: such models are operator-owned (superusers change them).
REPOSITORY_TEAM = env.str("REPOSITORY_TEAM", default="")

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
    "PREPROCESSING_HOOKS": ["models_store.openapi.only_management_api"],
    # Two choice sets named "state": the versions' keep the name they had before webhooks came.
    "ENUM_NAME_OVERRIDES": {
        "StateEnum": "models_store.models.ModelVersion.State",
        "DeliveryStateEnum": "models_store.models.WebhookDelivery.State",
        "WebhookEventEnum": "models_store.models.WebhookEvent",
    },
}

# --- Inference -------------------------------------------------------------
MODEL_STORE_DIR = Path(env.str("MODEL_STORE_DIR", default=str(VAR_DIR / "models")))
#: Where artifacts are kept for every machine: "filesystem" (MODEL_STORE_DIR
#: itself; the embedded default) or "s3" (S3-compatible object storage such as
#: MinIO, through django-storages). MODEL_STORE_DIR stays the local copy used
#: for validation and in-process serving either way.
MODEL_STORAGE = env.str("MODEL_STORAGE", default="filesystem")
if MODEL_STORAGE == "s3":
    _models_storage = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": env.str("MODEL_STORAGE_BUCKET", default="models"),
            "endpoint_url": env.str("MODEL_STORAGE_ENDPOINT", default="") or None,
            "access_key": env.str("MODEL_STORAGE_ACCESS_KEY", default="") or None,
            "secret_key": env.str("MODEL_STORAGE_SECRET_KEY", default="") or None,
            "region_name": env.str("MODEL_STORAGE_REGION", default="us-east-1"),
            "location": env.str("MODEL_STORAGE_PREFIX", default=""),
            "file_overwrite": True,
            "default_acl": None,
        },
    }
elif MODEL_STORAGE == "filesystem":
    _models_storage = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(MODEL_STORE_DIR)},
    }
else:
    raise ValueError(f"MODEL_STORAGE must be filesystem or s3, not {MODEL_STORAGE!r}")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "models": _models_storage,
}
#: Largest request body (and largest single tensor) accepted, in bytes (Triton: 64 MiB).
MAX_REQUEST_BYTES = env.int("MAX_REQUEST_BYTES", default=64 * 1024 * 1024)
#: Validation's warm-up inference runs only when the graph says it allocates at
#: most this many bytes (inputs, outputs, largest intermediate); else it is
#: skipped and the validation log says why.
VALIDATION_WARMUP_MAX_BYTES = env.int("VALIDATION_WARMUP_MAX_BYTES", default=MAX_REQUEST_BYTES)
#: ONNX Runtime: execution providers in order of preference, thread counts.
ORT_EXECUTION_PROVIDERS = env.list("ORT_EXECUTION_PROVIDERS", default=["CPUExecutionProvider"])
ORT_DEVICE_ID = env.int("ORT_DEVICE_ID", default=0)
ORT_INTRA_OP_THREADS = env.int("ORT_INTRA_OP_THREADS", default=1)
ORT_INTER_OP_THREADS = env.int("ORT_INTER_OP_THREADS", default=1)
#: Model instances a CPU worker runs of a model without an instance group (0: as many as its cores
#: hold sessions of ORT_INTRA_OP_THREADS threads, as a GPU worker fills its GPU).
WORKER_CPU_INSTANCES = env.int("WORKER_CPU_INSTANCES", default=0)
ORT_GRAPH_OPTIMIZATION = env.str("ORT_GRAPH_OPTIMIZATION", default="all")
#: How often each server process checks the registry's change stamp, in seconds.
REGISTRY_POLL_SECONDS = env.float("REGISTRY_POLL_SECONDS", default=1.0)
#: A version that stops serving (a new default, a label moved, a split changed,
#: deleted, unloaded) keeps running this long for requests routed to it before
#: every process saw the change (s; at least a few REGISTRY_POLL_SECONDS).
VERSION_DRAIN_SECONDS = env.float("VERSION_DRAIN_SECONDS", default=5.0)
#: HTTP server (granian) processes and threads per process.
HTTP_WORKERS = env.int("HTTP_WORKERS", default=2)
HTTP_THREADS = env.int("HTTP_THREADS", default=4)
#: More threads per HTTP process that only wait for request bodies: a body
#: that trickles in holds one of these, never one of the HTTP_THREADS that
#: work (hosting/body_gate.py).
HTTP_BODY_THREADS = env.int("HTTP_BODY_THREADS", default=32)
#: A request body must have arrived this many seconds after its request
#: started (else 408), plus one second per BODY_MIN_BYTES_PER_SECOND bytes
#: received or being read (large bodies over slow links).
BODY_READ_TIMEOUT_SECONDS = env.float("BODY_READ_TIMEOUT_SECONDS", default=30.0)
BODY_MIN_BYTES_PER_SECOND = env.int("BODY_MIN_BYTES_PER_SECOND", default=64 * 1024)

#: gRPC server processes (sharing the port), threads per process for worker
#: mode, and the grace period for in-flight calls on stop (s).
GRPC_PROCESSES = env.int("GRPC_PROCESSES", default=2)
GRPC_THREADS = env.int("GRPC_THREADS", default=16)
GRPC_GRACE_SECONDS = env.float("GRPC_GRACE_SECONDS", default=10.0)
#: Set by `serve --grpc-port` for its children: the gRPC server creates this
#: file once it listens (and removes it on stop), and the HTTP ready route
#: answers 503 while it is missing, so that "ready" means both transports.
GRPC_READY_FILE = env.str("GRPC_READY_FILE", default="")

# --- Redis and Celery -----------------------------------------------------
#: Unset: the embedded mode (Celery tasks run eagerly in process). Set, e.g.
#: redis://127.0.0.1:6379/0: tasks go to Redis and run in workers.
REDIS_URL = env.str("REDIS_URL", default="")
CELERY_BROKER_URL = REDIS_URL or "memory://localhost/"
CELERY_RESULT_BACKEND = REDIS_URL or None
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]  # never pickle
CELERY_TASK_DEFAULT_QUEUE = "modelhost.control"  # hosting/celery.py CONTROL_QUEUE: every worker consumes it
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = False
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_WORKER_DISABLE_RATE_LIMITS = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False  # LOGGING below applies; Celery's per-task lines are quieted there
CELERY_TASK_PUBLISH_RETRY = False
CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_connect_timeout": 3, "socket_timeout": 10}

# --- Webhooks (models_store/webhooks.py, docs/webhooks.md) ----------------------------
#: Hosts (names or IP addresses, as in the URL) a webhook may target even though they
#: resolve to a private, loopback or link-local address (by default such targets are refused).
WEBHOOK_ALLOWED_HOSTS = env.list("WEBHOOK_ALLOWED_HOSTS", default=[])
#: A failed delivery is retried after this many seconds, doubling up to the maximum, ...
WEBHOOK_RETRY_SECONDS = env.float("WEBHOOK_RETRY_SECONDS", default=5.0)
WEBHOOK_RETRY_MAX_SECONDS = env.float("WEBHOOK_RETRY_MAX_SECONDS", default=3600.0)
#: ... for this long after the event (s); then the delivery is FAILED (a redeliver sends it again).
WEBHOOK_RETRY_WINDOW_SECONDS = env.float("WEBHOOK_RETRY_WINDOW_SECONDS", default=24 * 3600.0)
#: Seconds an attempt may take (connect and answer); bytes of the answer kept with it.
WEBHOOK_TIMEOUT_SECONDS = env.float("WEBHOOK_TIMEOUT_SECONDS", default=10.0)
WEBHOOK_RESPONSE_BODY_BYTES = env.int("WEBHOOK_RESPONSE_BODY_BYTES", default=2048)

# --- Outages: validation retries, the reaper, the scheduled cleanup -------------
#: A validation interrupted by a dependency (database, S3, broker, disk space)
#: is retried after this many seconds, doubling up to the maximum (never FAILED for it).
VALIDATION_RETRY_SECONDS = env.float("VALIDATION_RETRY_SECONDS", default=2.0)
VALIDATION_RETRY_MAX_SECONDS = env.float("VALIDATION_RETRY_MAX_SECONDS", default=60.0)
#: A version left UPLOADED or VALIDATING longer than this is queued for validation again (s).
VALIDATION_DEADLINE_SECONDS = env.float("VALIDATION_DEADLINE_SECONDS", default=600.0)
#: Where this process validates uploads itself (the embedded server): files up to this size are
#: validated before the upload answers (201 READY / 422 FAILED), larger ones in the background,
#: one at a time (202; the version's page follows its state). 0: always in the background.
VALIDATE_IN_REQUEST_MAX_BYTES = env.int("VALIDATE_IN_REQUEST_MAX_BYTES", default=64 * 1024 * 1024)
#: What an interrupted upload left (staging files, artifacts and S3 objects without
#: a version row) is removed once older than this (s) ...
ORPHAN_MIN_AGE_SECONDS = env.float("ORPHAN_MIN_AGE_SECONDS", default=600.0)
#: ... by the upkeep timer of `serve` and of validating workers, every this many
#: seconds (the reaper runs on it too; 0: no timer, then run `manage.py cleanup_store`).
MAINTENANCE_SECONDS = env.float("MAINTENANCE_SECONDS", default=60.0)
#: Refused inference requests (5xx, 429) are summed up in one log line per this many seconds.
REFUSAL_LOG_SECONDS = env.float("REFUSAL_LOG_SECONDS", default=10.0)

# --- Execution mode and workers ---------------------------------------------
#: inprocess (default: ONNX Runtime in each server process) or workers (pinned
#: workers started with `manage.py runworker --device ...`, needs REDIS_URL).
INFERENCE_EXECUTOR = env.str("INFERENCE_EXECUTOR", default="inprocess")
#: Bytes of answers each server process keeps for models whose config enables the response cache
#: (``response_cache { enable: true }``; least recently used out first). 0: no cache.
RESPONSE_CACHE_BYTES = env.int("RESPONSE_CACHE_BYTES", default=128 * 1024 * 1024)
#: A Redis every front end shares the response cache through (worker mode: the answer one process
#: computed serves all); empty: each process keeps its own only. Bound its memory with Redis's
#: maxmemory + allkeys-lru. Entries expire after RESPONSE_CACHE_REDIS_TTL_SECONDS; a Redis slower
#: than RESPONSE_CACHE_REDIS_TIMEOUT_SECONDS counts as a miss.
RESPONSE_CACHE_REDIS_URL = env.str("RESPONSE_CACHE_REDIS_URL", default="")
RESPONSE_CACHE_REDIS_TTL_SECONDS = env.int("RESPONSE_CACHE_REDIS_TTL_SECONDS", default=3600)
RESPONSE_CACHE_REDIS_TIMEOUT_SECONDS = env.float("RESPONSE_CACHE_REDIS_TIMEOUT_SECONDS", default=0.25)
#: Models at least this large (MiB, with their external data) load their weights memory-mapped from one
#: per-machine copy ($VAR_DIR/run/weights), shared by every server process and CPU worker of the machine
#: (inference/runtime/shared_weights.py); 0: each session keeps its own copy. CPU execution only.
SHARED_WEIGHTS_MIN_MB = env.int("SHARED_WEIGHTS_MIN_MB", default=256)
#: Whether those sessions still pre-pack weights for ONNX Runtime's matrix kernels: faster on some models
#: (MiniLM: about 10%), but each session then keeps its own packed copy of those weights.
SHARED_WEIGHTS_PREPACK = env.bool("SHARED_WEIGHTS_PREPACK", default=False)
#: Memory a worker's loaded sessions may use (each charged what its load took), MiB.
WORKER_MEMORY_BUDGET_MB = env.int("WORKER_MEMORY_BUDGET_MB", default=4096)
#: The same budget for the sessions of the machine's server processes in process mode (0: none), MiB:
#: each of the SERVING_PROCESSES gets an equal share.
SESSION_MEMORY_BUDGET_MB = env.int("SESSION_MEMORY_BUDGET_MB", default=0)
#: How many processes serve inference in process on this machine (`serve` sets it: HTTP + gRPC processes).
SERVING_PROCESSES = env.int("SERVING_PROCESSES", default=1)
#: Where a worker accepts front-end connections from other machines over
#: mutual TLS (host:port; port 0: any free port; needs the WORKER_TLS_* files).
#: Empty: no TCP listener, only the worker's Unix socket (front ends on its machine).
WORKER_LISTEN = env.str("WORKER_LISTEN", default="")
#: The worker link's mutual TLS (inference/runtime/link.py): the deployment's CA
#: certificate, and this process's certificate and key (a worker's: serverAuth
#: for WORKER_TLS_SERVER_NAME; a front end's: clientAuth), PEM files; all three or none.
WORKER_TLS_CA = env.str("WORKER_TLS_CA", default="")
WORKER_TLS_CERT = env.str("WORKER_TLS_CERT", default="")
WORKER_TLS_KEY = env.str("WORKER_TLS_KEY", default="")
WORKER_TLS_SERVER_NAME = env.str("WORKER_TLS_SERVER_NAME", default="modelhost-worker")
#: A worker also listens on a Unix socket in $VAR_DIR/run/ for front ends on its machine.
WORKER_UNIX_SOCKET = env.bool("WORKER_UNIX_SOCKET", default=True)
#: Connections a worker holds at most, in all and per authenticated front end (a
#: process on its machine; over TLS a certificate at one address); idle ones are
#: closed after WORKER_IDLE_SECONDS (front ends drop theirs at half that).
WORKER_MAX_CONNECTIONS = env.int("WORKER_MAX_CONNECTIONS", default=1024)
WORKER_MAX_CONNECTIONS_PER_PEER = env.int("WORKER_MAX_CONNECTIONS_PER_PEER", default=256)
WORKER_IDLE_SECONDS = env.float("WORKER_IDLE_SECONDS", default=300.0)
#: Connections each front-end process holds to one worker at most; a request
#: beyond waits (until its deadline) for one to come free (docs/worker-mode.md).
WORKER_CONNECTIONS_PER_PROCESS = env.int("WORKER_CONNECTIONS_PER_PROCESS", default=32)
#: How long a draining worker (SIGTERM, manage.py drainworker) waits for the
#: requests it holds before it exits (s).
WORKER_DRAIN_SECONDS = env.float("WORKER_DRAIN_SECONDS", default=20.0)
#: The host:port front ends connect to (default: the listening address; set it
#: when the worker listens on 0.0.0.0 or behind NAT, e.g. worker-gpu0:7070).
WORKER_ADVERTISE = env.str("WORKER_ADVERTISE", default="")
#: Where a worker caches artifacts by sha256 (no shared disk needed).
WORKER_CACHE_DIR = Path(env.str("WORKER_CACHE_DIR", default=str(VAR_DIR / "worker-cache")))
#: A cuda:<n> worker without the CUDA provider runs on the CPU instead of refusing to start.
WORKER_CPU_FALLBACK = env.bool("WORKER_CPU_FALLBACK", default=False)
#: The pool a worker belongs to (e.g. its Kubernetes Deployment: one per GPU
#: kind), reported in its heartbeat: /metrics and the KEDA lists add up per pool.
WORKER_POOL = env.str("WORKER_POOL", default="")
#: Front ends keep a Redis list per device queue whose length is the queue's
#: depth (modelhost:queue-depth:<queue>), for KEDA's Redis scaler.
QUEUE_DEPTH_KEYS = env.bool("QUEUE_DEPTH_KEYS", default=False)
#: In worker mode, the deadline of a request that sets none (s).
WORKER_TIMEOUT_SECONDS = env.float("WORKER_TIMEOUT_SECONDS", default=30.0)

# --- Inference access control ----------------------------------------------
#: When true, inference needs ``Authorization: Bearer <token>`` (REST) or the
#: same ``authorization`` key in gRPC metadata; see inference/auth.py.
INFERENCE_REQUIRE_TOKEN = env.bool("INFERENCE_REQUIRE_TOKEN", default=False)
#: Token scopes are reloaded when the registry stamp moves, and at the latest after this many seconds.
INFERENCE_TOKEN_CACHE_SECONDS = env.float("INFERENCE_TOKEN_CACHE_SECONDS", default=30.0)

# --- Rate limits (inference/ratelimit.py) ----------------------------------------
#: Default limits of inference per team (its whole traffic), per API token and
#: for anonymous callers together: requests per second, burst, inferences in
#: flight; 0 means unlimited. Operators give a team its own limits in the admin
#: or with `manage.py set_team_limits`.
RATE_LIMIT_TEAM_RPS = env.float("RATE_LIMIT_TEAM_RPS", default=0.0)
RATE_LIMIT_TEAM_BURST = env.int("RATE_LIMIT_TEAM_BURST", default=0)
RATE_LIMIT_TEAM_IN_FLIGHT = env.int("RATE_LIMIT_TEAM_IN_FLIGHT", default=0)
RATE_LIMIT_TOKEN_RPS = env.float("RATE_LIMIT_TOKEN_RPS", default=0.0)
RATE_LIMIT_TOKEN_BURST = env.int("RATE_LIMIT_TOKEN_BURST", default=0)
RATE_LIMIT_TOKEN_IN_FLIGHT = env.int("RATE_LIMIT_TOKEN_IN_FLIGHT", default=0)
RATE_LIMIT_ANONYMOUS_RPS = env.float("RATE_LIMIT_ANONYMOUS_RPS", default=0.0)
RATE_LIMIT_ANONYMOUS_BURST = env.int("RATE_LIMIT_ANONYMOUS_BURST", default=0)
RATE_LIMIT_ANONYMOUS_IN_FLIGHT = env.int("RATE_LIMIT_ANONYMOUS_IN_FLIGHT", default=0)
#: Where every process shares the limits (default: REDIS_URL); empty: each
#: process keeps its own (the embedded mode, one machine).
# Fair admission to model instances (inference/fair_share.py; docs/rate-limits.md#fair-share): each
# team is a flow; when a version's seats are all taken, requests wait in their flow's queue and
# seats go to the flows in turn. FAIR_QUEUE_PER_FLOW: requests one flow may have waiting per server
# process (more are refused 429 / RESOURCE_EXHAUSTED; on gRPC a waiting request is a coroutine, so
# the default lets a burst of a few hundred calls wait rather than be refused and resent, which would
# queue the resends in front of everyone in gRPC's own FIFO); FAIR_SHARE_WEIGHTS: team=weight pairs
# (turns per round, default 1); FAIR_SHARE=false turns it off (requests then wait in arrival order).
FAIR_SHARE = env.bool("FAIR_SHARE", default=True)
FAIR_QUEUE_PER_FLOW = env.int("FAIR_QUEUE_PER_FLOW", default=256)
# Sequences one team may have waiting for a sequence slot of a model version (more STARTs: 429).
FAIR_SEQUENCE_BACKLOG = env.int("FAIR_SEQUENCE_BACKLOG", default=64)
FAIR_SHARE_WEIGHTS = {k: int(v) for k, v in env.dict("FAIR_SHARE_WEIGHTS", default={}).items()}
RATE_LIMIT_REDIS_URL = env.str("RATE_LIMIT_REDIS_URL", default=REDIS_URL)
#: An in-flight slot of a process that died is freed after this long (s).
RATE_LIMIT_LEASE_SECONDS = env.float("RATE_LIMIT_LEASE_SECONDS", default=120.0)

# --- Ensembles (models_store/ensembles.py) -------------------------------------------
#: The most steps an ensemble may have (uploads and repository imports above it are
#: refused); each step is one inference per request (docs/ensembles.md).
ENSEMBLE_MAX_STEPS = env.int("ENSEMBLE_MAX_STEPS", default=64)

# --- Tracing (inference/tracing.py) ------------------------------------------------
#: OpenTelemetry traces go to this OTLP/HTTP endpoint (e.g. http://127.0.0.1:4318,
#: Jaeger's); empty: tracing is off and costs nothing. The exporter also reads the
#: other OTEL_EXPORTER_OTLP_* variables (headers, timeout, ...).
OTEL_EXPORTER_OTLP_ENDPOINT = env.str("OTEL_EXPORTER_OTLP_ENDPOINT", default="")
OTEL_SERVICE_NAME = env.str("OTEL_SERVICE_NAME", default="modelhost")
#: Spans also (or only) as JSON lines in this file: a collector stand-in for tests and debugging.
TRACE_SPAN_FILE = env.str("TRACE_SPAN_FILE", default="")

# --- Payload logging (inference/payload_log.py) -----------------------------------
#: Where models that opt in (payload_log_rate) send their sampled request/response
#: pairs: a file path (JSON lines) or an http(s):// URL (one POST per pair); empty: nowhere.
PAYLOAD_LOG_SINK = env.str("PAYLOAD_LOG_SINK", default="")
#: Pairs waiting for the sink per process; beyond, pairs are dropped (and counted).
PAYLOAD_LOG_QUEUE = env.int("PAYLOAD_LOG_QUEUE", default=1000)

#: Level of the one-line-per-request log (logger inference.request); DEBUG keeps
#: it quiet under LOG_LEVEL=INFO.
REQUEST_LOG_LEVEL = env.str("REQUEST_LOG_LEVEL", default="DEBUG")
#: How often each process adds its inference statistics to the database (s).
STATISTICS_FLUSH_SECONDS = env.float("STATISTICS_FLUSH_SECONDS", default=1.0)
# --- Charts (inference/rollups.py, docs/charts.md) ----------------------------------
#: Count per-minute rollups of requests, errors, latencies and batch sizes for the charts.
CHART_ROLLUPS = env.bool("CHART_ROLLUPS", default=True)
#: How often each process writes its open minutes to the database (s; at most a
#: minute's worth of a process's counts is lost when it is killed).
CHART_FLUSH_SECONDS = env.float("CHART_FLUSH_SECONDS", default=10.0)
#: Minutes older than this are deleted by the scheduled upkeep (MAINTENANCE_SECONDS).
CHART_RETENTION_DAYS = env.float("CHART_RETENTION_DAYS", default=8.0)
#: Server-side bound on an inference in seconds (0: none); a request's own
#: ``timeout`` parameter (microseconds, as Triton) can only shorten it.
INFERENCE_TIMEOUT_SECONDS = env.float("INFERENCE_TIMEOUT_SECONDS", default=0.0)

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
    },
}
