"""Which failures are a dependency's outage (retry later), not the request's fault.

:func:`transient` tells the failures of the model store's dependencies that
pass when the dependency is back: PostgreSQL (or SQLite) unreachable or
busy, the storage backend (S3) unreachable, timing out or answering 5xx,
the broker (Redis) unreachable, and a full disk. A validation that meets
one is retried, never FAILED; a request that meets one is answered 503 with
``Retry-After`` (507 for a full disk), never 500 or 400 (:func:`http_answer`).
"""

from __future__ import annotations

import errno
from contextlib import contextmanager

from django.db import InterfaceError
from django.db import OperationalError as DatabaseError

#: Seconds a client is told to wait (``Retry-After``) when a dependency is down.
RETRY_AFTER_SECONDS = 5

_S3_BUSY_CODES = frozenset({"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling"})


def _dependency_errors() -> tuple[type[BaseException], ...]:
    import redis
    from botocore.exceptions import ConnectionError as BotoConnectionError
    from botocore.exceptions import HTTPClientError
    from kombu.exceptions import OperationalError as BrokerError

    return (
        DatabaseError, InterfaceError, BotoConnectionError, HTTPClientError, BrokerError,
        redis.ConnectionError, redis.TimeoutError, ConnectionError, TimeoutError,
    )  # fmt: skip


def no_space(exc: BaseException) -> bool:
    """True for "no space left on device" (or over a disk quota)."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def transient_cause(exc: BaseException | None) -> BaseException | None:
    """``exc``, or the exception it was raised from, when that is a
    dependency's outage or a full disk (the same call can succeed later);
    None otherwise."""
    from botocore.exceptions import ClientError

    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, _dependency_errors()) or no_space(exc):
            return exc
        if isinstance(exc, ClientError):
            response = exc.response or {}
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if status >= 500 or response.get("Error", {}).get("Code") in _S3_BUSY_CODES:
                return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def transient(exc: BaseException) -> bool:
    """True when ``exc`` is a dependency's outage or a full disk (:func:`transient_cause`)."""
    return transient_cause(exc) is not None


def dependency_name(exc: BaseException) -> str:
    """Which dependency ``exc`` comes from, for messages: "the database",
    "the storage backend", "the broker (Redis)", "disk space", or "a dependency"."""
    from botocore.exceptions import BotoCoreError, ClientError

    if no_space(exc):
        return "disk space"
    if isinstance(exc, (DatabaseError, InterfaceError)):
        return "the database"
    if isinstance(exc, (BotoCoreError, ClientError)):
        return "the storage backend"
    module = type(exc).__module__
    if module.startswith(("redis", "kombu")):
        return "the broker (Redis)"
    return "a dependency"


def http_answer(exc: BaseException) -> tuple[int, str, dict] | None:
    """``(status, message, headers)`` for a transient failure of a request
    (503 with ``Retry-After``; 507 for a full disk), None for anything else."""
    exc = transient_cause(exc)
    if exc is None:
        return None
    if no_space(exc):
        return 507, "the server has no space left to store this upload; try again later", {}
    message = (
        f"{dependency_name(exc)} is unavailable ({type(exc).__name__}); "
        f"nothing was changed, try again in {RETRY_AFTER_SECONDS} s"
    )
    return 503, message, {"Retry-After": str(RETRY_AFTER_SECONDS)}


def protocol_error(exc: BaseException):
    """``exc`` (or what it was raised from), when a dependency's outage or a
    full disk, as the inference protocol's
    :class:`~inference.protocol.errors.DependencyUnavailable` with this
    module's message and ``Retry-After``; None for anything else. Installed
    as the serving side's ``outage_error`` port (:mod:`inference.ports`)."""
    from inference.protocol.errors import DependencyUnavailable

    answer = http_answer(exc)
    return None if answer is None else DependencyUnavailable(answer[1], RETRY_AFTER_SECONDS)


@contextmanager
def as_unavailable():
    """Raise a dependency's outage met in the block as the inference
    protocol's :class:`~inference.protocol.errors.DependencyUnavailable`
    (REST 503 with ``Retry-After``, gRPC UNAVAILABLE), not as INTERNAL."""
    try:
        yield
    except Exception as exc:
        error = protocol_error(exc)
        if error is None:
            raise
        raise error from exc
