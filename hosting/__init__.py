"""The Django project of the model-hosting platform."""

__version__ = "0.1.0"
SERVER_NAME = "modelhost"

from hosting.celery import app as celery_app  # noqa: E402  (Django loads Celery with the project)

__all__ = ["SERVER_NAME", "__version__", "celery_app"]
