"""Protocol errors, independent of any transport, and the one table that maps
them to every transport.

Each error carries a ``code`` naming its category in the vocabulary shared by
gRPC and TensorFlow (``INVALID_ARGUMENT``, ``NOT_FOUND``, ``UNAVAILABLE``, ...)
and, beside it, its HTTP status (V2 REST and TF Serving REST answer alike)
and its gRPC status name. Each transport maps once, from these attributes:
the REST and TF Serving adapters through ``http_status``, the gRPC adapter
through ``grpc_status``, the worker transport by ``code`` (:func:`from_code`).
The message is what the client sees: it names what is wrong and where.
An error after which a retry can succeed (every 503 but a refused model
control, and 429) carries
``retry_after`` (seconds): REST answers it as ``Retry-After``, gRPC as
``retry-after`` trailing metadata (whole seconds, at least 1).
"""

from __future__ import annotations

import math


class InferenceError(Exception):
    """Base class; anything unexpected (HTTP 500, gRPC INTERNAL)."""

    code = "INTERNAL"
    http_status = 500
    grpc_status = "INTERNAL"
    #: Seconds after which the same request can succeed (None: it will not by waiting).
    retry_after: float | None = None
    #: The model version the failed request was routed to ("" before it was), for the metrics' labels.
    served_version: str = ""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    @property
    def retry_after_header(self) -> str | None:
        """``retry_after`` as ``Retry-After`` takes it: whole seconds, at least 1 (None: no header)."""
        if self.retry_after is None:
            return None
        return str(max(1, math.ceil(self.retry_after)))


class InvalidInput(InferenceError):
    """The request is malformed or does not fit the model (HTTP 400)."""

    code = "INVALID_ARGUMENT"
    http_status = 400
    grpc_status = "INVALID_ARGUMENT"


class DataMismatch(InvalidInput):
    """An input's data does not fill its declared shape (HTTP 400, gRPC
    INVALID_ARGUMENT): a decoder that meets several names the last one, as
    Triton does (it checks a request's inputs in reverse order)."""


class RegionNotOpened(InvalidInput):
    """A shared-memory object that cannot be opened: the client's mistake
    over REST (HTTP 400), gRPC INTERNAL as Triton answers it (its
    ``OpenSharedMemoryRegion``; Triton's clients and QA tests expect it)."""

    grpc_status = "INTERNAL"


class ModelNotFound(InferenceError):
    """No such model, model version or version label (HTTP 404)."""

    code = "NOT_FOUND"
    http_status = 404
    grpc_status = "NOT_FOUND"


class ModelNotReady(InferenceError):
    """The model or version exists but cannot serve now (HTTP 503 with
    ``Retry-After``, gRPC UNAVAILABLE with ``retry-after``): ``retry_after``,
    seconds (e.g. a worker's heartbeat expiry when no worker serves it)."""

    code = "UNAVAILABLE"
    http_status = 503
    grpc_status = "UNAVAILABLE"

    def __init__(self, message: str, retry_after: float = 1.0):
        super().__init__(message)
        self.retry_after = retry_after


class DependencyUnavailable(ModelNotReady):
    """A dependency of the server (its database, storage backend, broker) is
    down: try again later (HTTP 503 with ``Retry-After``, gRPC UNAVAILABLE).
    ``retry_after``: seconds."""

    def __init__(self, message: str, retry_after: float = 5.0):
        super().__init__(message, retry_after)


class RequestTooLarge(InferenceError):
    """The request body or a tensor exceeds the configured limit (HTTP 413;
    over gRPC the client's mistake, INVALID_ARGUMENT, since the transport's
    own, higher, limit still answers RESOURCE_EXHAUSTED)."""

    code = "RESOURCE_EXHAUSTED"
    http_status = 413
    grpc_status = "INVALID_ARGUMENT"


class DeadlineExceeded(InferenceError):
    """The request's deadline passed before it completed (HTTP 504)."""

    code = "DEADLINE_EXCEEDED"
    http_status = 504
    grpc_status = "DEADLINE_EXCEEDED"


class Unsupported(InferenceError):
    """The request asks for something this server does not implement (HTTP 501)."""

    code = "UNIMPLEMENTED"
    http_status = 501
    grpc_status = "UNIMPLEMENTED"


class Unauthenticated(InferenceError):
    """No valid credentials were given (HTTP 401)."""

    code = "UNAUTHENTICATED"
    http_status = 401
    grpc_status = "UNAUTHENTICATED"


class PermissionDenied(InferenceError):
    """The credentials do not allow this model or operation (HTTP 403)."""

    code = "PERMISSION_DENIED"
    http_status = 403
    grpc_status = "PERMISSION_DENIED"


class RateLimited(InferenceError):
    """The caller (its team, its token, or anonymous callers together) is over
    its request rate or its in-flight inferences (HTTP 429 with
    ``Retry-After``; gRPC RESOURCE_EXHAUSTED with ``retry-after`` trailing
    metadata). ``retry_after``: seconds after which a retry can succeed."""

    code = "RATE_LIMITED"
    http_status = 429
    grpc_status = "RESOURCE_EXHAUSTED"

    def __init__(self, message: str, retry_after: float = 1.0):
        super().__init__(message)
        self.retry_after = retry_after


class QueueFull(InferenceError):
    """A dynamic batcher's queue (of the request's priority level) holds its
    ``max_queue_size``: refused at once, before it queued (HTTP 503, gRPC
    UNAVAILABLE, as Triton answers; not counted as a failed inference of
    the model, as Triton does not count a request it could not enqueue)."""

    code = "QUEUE_FULL"
    http_status = 503
    grpc_status = "UNAVAILABLE"


class InUse(InferenceError):
    """A change refused because something that serves depends on its target
    (e.g. unloading a model that a ready ensemble composes; HTTP 409)."""

    code = "FAILED_PRECONDITION"
    http_status = 409
    grpc_status = "FAILED_PRECONDITION"


class ModelControlDisabled(InferenceError):
    """A repository load or unload while the model control mode is ``none``
    or ``poll`` (``serve --model-control-mode``): HTTP 503, gRPC
    UNAVAILABLE, as Triton answers it, without ``retry_after`` (waiting
    does not change the mode)."""

    code = "UNAVAILABLE"
    http_status = 503
    grpc_status = "UNAVAILABLE"


_BY_CODE: dict[str, type[InferenceError]] = {}
for _cls in (
    InferenceError, InvalidInput, ModelNotFound, ModelNotReady, RequestTooLarge, DeadlineExceeded, Unsupported,
    Unauthenticated, PermissionDenied, RateLimited, QueueFull, InUse,
):  # fmt: skip
    _BY_CODE.setdefault(_cls.code, _cls)


def from_code(code: str, message: str) -> InferenceError:
    """The error of a category (as another process reported it); INTERNAL for an unknown code."""
    return _BY_CODE.get(code, InferenceError)(message)
