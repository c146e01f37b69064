"""The model store: where artifacts live (a directory, or S3), repository
imports, validation (its retries, the reaper, the warm-up bound), the
scheduled upkeep, and the webhooks of teams."""

from __future__ import annotations

from pathlib import Path

from hosting.settings.base import VAR_DIR, env
from hosting.settings.servers import MAX_REQUEST_BYTES

#: Team given to models imported from a repository directory (serve --model-repository,
#: import_repository) that have none; empty: such models are operator-owned (superusers change them).
REPOSITORY_TEAM = env.str("REPOSITORY_TEAM", default="")

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
#: Validation's warm-up inference runs only when the graph says it allocates at
#: most this many bytes (inputs, outputs, largest intermediate); else it is
#: skipped and the validation log says why.
VALIDATION_WARMUP_MAX_BYTES = env.int("VALIDATION_WARMUP_MAX_BYTES", default=MAX_REQUEST_BYTES)

# --- Ensembles (models_store/intake/ensembles.py) -----------------------------------
#: The most steps an ensemble may have (uploads and repository imports above it are
#: refused); each step is one inference per request (docs/ensembles.md).
ENSEMBLE_MAX_STEPS = env.int("ENSEMBLE_MAX_STEPS", default=64)

# --- Webhooks (models_store/webhooks/, docs/webhooks.md) ------------------------------
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
#: How often `serve` judges the steps of progressive rollouts that are due (s; 0: never;
#: models_store/maintenance.py start_rollouts, docs/rollouts.md).
ROLLOUT_TICK_SECONDS = env.float("ROLLOUT_TICK_SECONDS", default=5.0)
