"""gunicorn configuration for the REST server (``manage.py serve`` starts it).

Bind address, processes and threads come from the environment that ``serve``
sets (HTTP_BIND, HTTP_WORKERS, HTTP_THREADS).
"""

import os

bind = os.environ.get("HTTP_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("HTTP_WORKERS", "2"))
threads = int(os.environ.get("HTTP_THREADS", "8"))
worker_class = "gthread" if threads > 1 else "sync"
timeout = int(os.environ.get("HTTP_TIMEOUT", "120"))
graceful_timeout = 20
keepalive = 75
accesslog = None
errorlog = "-"
loglevel = os.environ.get("LOG_LEVEL", "info").lower()
proc_name = "modelhost-http"
control_socket_disable = True  # gunicorn 27 control socket: one fixed path would clash between servers


def post_worker_init(worker):
    """Load the registry snapshot before the worker takes its first request."""
    from inference.dataplane import get_dataplane

    get_dataplane()


def child_exit(server, worker):
    """Drop a dead worker's live gauges (Prometheus multiprocess mode)."""
    from inference.observability import mark_process_dead

    mark_process_dead(worker.pid)
