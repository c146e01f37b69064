"""WSGI entry point (``manage.py serve`` runs it under granian).

Inference protocol paths take a lean Django handler; the rest of the site the
standard one (see hosting/wsgi_dispatch.py).
"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hosting.settings")
django.setup(set_prefix=False)

from django.core.handlers.wsgi import WSGIHandler  # noqa: E402

from hosting.wsgi_dispatch import Dispatcher, ProtocolHandler  # noqa: E402

application = Dispatcher(ProtocolHandler(), WSGIHandler())

if os.environ.get("MODELHOST_WARM_START", "1") == "1":
    # Each server process loads the registry snapshot (and starts its poller)
    # before its first request, not during it.
    from inference.dataplane import get_dataplane

    get_dataplane()
