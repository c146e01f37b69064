"""The Django project of the model-hosting platform."""

__version__ = "0.1.0"
SERVER_NAME = "modelhost"
