"""The Celery application.

Embedded mode (no ``REDIS_URL``): tasks run eagerly in the calling process,
so one machine needs nothing else. With ``REDIS_URL`` set, tasks go to Redis
and run in workers (``celery -A hosting worker``, or ``manage.py runworker``).
Configuration comes from Django settings with the ``CELERY_`` prefix.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hosting.settings")

import inference.runtime.wire  # noqa: F401  (registers the "modelhost" serializer named in CELERY_ACCEPT_CONTENT)

app = Celery("hosting")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
