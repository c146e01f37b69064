"""Redis and Celery: the broker of control work (validation, webhook
deliveries; never inference). Without REDIS_URL, the embedded mode: tasks
run in the calling process."""

from __future__ import annotations

from hosting.settings.base import env

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
# Retried like a connection lost later: runworker checks Redis itself before it announces the worker (a clear
# error at start-up), so Redis going away in the second before Celery's consumer connects must not shut down a
# worker that front ends already send requests to (tests/workers/test_workers.py).
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_WORKER_DISABLE_RATE_LIMITS = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False  # LOGGING below applies; Celery's per-task lines are quieted there
CELERY_TASK_PUBLISH_RETRY = False
CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_connect_timeout": 3, "socket_timeout": 10}
