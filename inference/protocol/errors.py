"""Protocol errors, independent of any transport.

Each error carries a ``code`` naming its category in the vocabulary shared by
gRPC and TensorFlow (``INVALID_ARGUMENT``, ``NOT_FOUND``, ``UNAVAILABLE``, ...).
The REST, gRPC and TF Serving adapters each map the category once to their own
status codes (see ``inference/rest/exceptions.py`` and ``inference/grpc``).
The message is what the client sees: it names what is wrong and where.
"""

from __future__ import annotations


class InferenceError(Exception):
    """Base class; ``code`` is the transport-neutral category."""

    code = "INTERNAL"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class InvalidInput(InferenceError):
    """The request is malformed or does not fit the model (HTTP 400)."""

    code = "INVALID_ARGUMENT"


class ModelNotFound(InferenceError):
    """No such model, model version or version label (HTTP 404)."""

    code = "NOT_FOUND"


class ModelNotReady(InferenceError):
    """The model or version exists but cannot serve now (HTTP 503)."""

    code = "UNAVAILABLE"


class RequestTooLarge(InferenceError):
    """The request body or a tensor exceeds the configured limit (HTTP 413)."""

    code = "RESOURCE_EXHAUSTED"


class DeadlineExceeded(InferenceError):
    """The request's deadline passed before it completed (HTTP 504)."""

    code = "DEADLINE_EXCEEDED"


class Unsupported(InferenceError):
    """The request asks for something this server does not implement (HTTP 400)."""

    code = "UNIMPLEMENTED"


class Unauthenticated(InferenceError):
    """No valid credentials were given (HTTP 401)."""

    code = "UNAUTHENTICATED"


class PermissionDenied(InferenceError):
    """The credentials do not allow this model (HTTP 403)."""

    code = "PERMISSION_DENIED"
