"""WSGI entry point (``manage.py serve`` runs it under granian).

Inference protocol paths take a lean Django handler; the rest of the site the
standard one (see hosting/wsgi_dispatch.py). In front of both, the body gate
(hosting/body_gate.py): work slots, body deadlines, short bodies.
"""

import os
import sys

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hosting.settings")
django.setup(set_prefix=False)

from django.conf import settings  # noqa: E402
from django.core.handlers.wsgi import WSGIHandler  # noqa: E402

from hosting.body_gate import BodyGate  # noqa: E402
from hosting.wsgi_dispatch import Dispatcher, ProtocolHandler  # noqa: E402

application = BodyGate(
    Dispatcher(ProtocolHandler(), WSGIHandler(), grpc_ready_file=settings.GRPC_READY_FILE),
    slots=settings.HTTP_THREADS,
    timeout=settings.BODY_READ_TIMEOUT_SECONDS,
    min_rate=settings.BODY_MIN_BYTES_PER_SECOND,
    drain_limit=settings.MAX_REQUEST_BYTES,
    queue_per_flow=max(1, settings.HTTP_BODY_THREADS // 2),  # one team never holds every waiting thread
)

if os.environ.get("MODELHOST_WARM_START", "1") == "1":
    # Each server process loads the registry snapshot (and starts its poller)
    # before its first request, not during it.
    from inference.dataplane import get_dataplane

    get_dataplane()

if settings.HTTP_CPU_AFFINITY == "soft" and "granian" in sys.modules:
    # In a granian worker (serve's HTTP server) only: a process that imports this
    # module for another reason (a test, a shell) keeps its placement. After the
    # warm start: loading the models is not confined to one CPU.
    from hosting.processes import affinity

    affinity.start("http")
