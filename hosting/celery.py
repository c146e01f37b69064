"""The Celery application.

Embedded mode (no ``REDIS_URL``): tasks run eagerly in the calling process,
so one machine needs nothing else. With ``REDIS_URL`` set, tasks go to Redis
(queue ``modelhost.control``) and run in the inference workers
(``manage.py runworker``, which consume it; or ``celery -A hosting worker -Q
modelhost.control``). Inference itself does not go through Celery.
Configuration comes from Django settings with the ``CELERY_`` prefix.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hosting.settings")

#: The queue of control work (validation of uploaded versions), consumed by
#: every inference worker (``manage.py runworker``).
CONTROL_QUEUE = "modelhost.control"

app = Celery("hosting")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
