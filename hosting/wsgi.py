"""WSGI entry point (used by ``manage.py serve`` through gunicorn)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hosting.settings")

application = get_wsgi_application()
