"""Validation of uploaded versions (what the validation task runs):
UPLOADED -> VALIDATING -> READY or FAILED, each step in the version's log;
each change through the state machine (:mod:`models_store.registry.services.states`),
the checks themselves :mod:`models_store.intake.validation`'s.

Where it runs is this process's :class:`Validator`, set by the composition
root: in an inference worker (``manage.py runworker``) the worker's host and
device, its execution providers (so a GPU worker warms the model up on its
GPU) and its artifact cache (the artifact is fetched from the storage
backend into ``WORKER_CACHE_DIR/<sha256>/``, where inference will find it);
elsewhere the server process, with the model store's local copy. The
version's log says where: ``queued ...`` while it waits (UPLOADED),
``validating on ...`` (VALIDATING), ``validated on ...`` then each step.
On a machine that shares big models' weights among its processes
(:attr:`Validator.sharing`) a big version is READY with the machine's copy
written (:mod:`inference.runtime.shared_weights`): its first request only
maps it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import close_old_connections

from inference.observability.outage import DependencyWatch
from inference.runtime import cuda
from inference.runtime.shared_weights import Sharing
from models_store import outages, storage
from models_store.config.triton import config_from_raw
from models_store.intake import validation
from models_store.registry import selectors
from models_store.registry.services import states

logger = logging.getLogger(__name__)

State = states.State


@dataclass(frozen=True)
class Validator:
    """Where this process validates versions: ``where`` (for the version's
    log), ONNX Runtime ``providers`` (names or ``(name, options)`` pairs) and
    ``cache_dir``: fetch artifacts into ``cache_dir/<sha256>/`` (a worker's
    cache), or None for the model store's local copy (MODEL_STORE_DIR);
    ``sharing``: where and from which size the machine's processes share
    big models' weights (the copy is written during validation), or None."""

    where: str = ""
    providers: tuple = ("CPUExecutionProvider",)
    cache_dir: Path | None = None
    sharing: Sharing | None = None

    def describe(self) -> str:
        """``where``, or this host and process (e.g. ``web-1, process 4242``)."""
        return self.where or f"{socket.gethostname()}, process {os.getpid()}"

    def artifact(self, relpath: str, sha256: str) -> Path:
        """A local path of the artifact's model file (fetched from the storage
        backend when this machine lacks it); raises FileNotFoundError."""
        if self.cache_dir is None:
            return storage.local_artifact(relpath)
        return storage.copy_artifact(relpath, Path(self.cache_dir) / sha256)


_validator = Validator()
_queue_note: Callable[[], str] = lambda: "a Celery worker takes it"  # noqa: E731
_validates_here: Callable[[], bool] | None = None


def configure(
    validator: Validator | None = None,
    queue_note: Callable[[], str] | None = None,
    validates_here: Callable[[], bool] | None = None,
) -> None:
    """Set where this process validates, how the upload answer describes
    who will take a queued validation (``queue_note()``: e.g. "2 inference
    workers take validation tasks", or that none is running), and whether
    this process validates uploads itself instead of queueing a task
    (``validates_here()``: the embedded server, with or without Redis, and
    a front end while no worker takes validation tasks)."""
    global _validator, _queue_note, _validates_here
    if validator is not None:
        _validator = validator
    if queue_note is not None:
        _queue_note = queue_note
    if validates_here is not None:
        _validates_here = validates_here


_broker_watch = DependencyWatch("the broker (Redis), asked who takes validation tasks,", logger)


def validates_here() -> bool:
    """True when this process validates uploads itself (see :func:`configure`;
    default: when Celery runs tasks eagerly, i.e. without REDIS_URL)."""
    if _validates_here is not None:
        watch = _broker_watch
        try:
            here = _validates_here()
        except Exception as exc:  # who takes tasks cannot be told: the broker is down, so validate here
            watch.failed(exc, "uploads are validated in this process")
            return True
        watch.ok()
        return here
    from celery import current_app

    return bool(current_app.conf.task_always_eager)


def current_validator() -> Validator:
    return _validator


def queued_log(queue: str) -> list[str]:
    """The log of a version whose validation was queued: where it waits, and who takes it."""
    try:
        note = _queue_note()
    except Exception as exc:  # describing the queue must never fail an upload
        note = f"who takes it is unknown ({type(exc).__name__})"
    return [f"queued for validation on queue {queue}: {note}"]


class ValidationInterrupted(Exception):
    """A dependency (database, storage backend, disk space) failed during a
    validation: it is retried, and the version is never FAILED for it. The
    version is UPLOADED again when the database could be told (else it stays
    VALIDATING: the retry, or the reaper, resumes it)."""


#: One line when a dependency fails validations, one when validations get through again.
_watches: dict[str, DependencyWatch] = {}


def _watch(name: str) -> DependencyWatch:
    watch = _watches.get(name)
    if watch is None:
        watch = _watches[name] = DependencyWatch(f"{name} (validation)", logger)
    return watch


def retry_delay(attempt: int) -> float:
    """Seconds before retry ``attempt`` (0: the first) of an interrupted
    validation: VALIDATION_RETRY_SECONDS doubling up to VALIDATION_RETRY_MAX_SECONDS."""
    return min(settings.VALIDATION_RETRY_MAX_SECONDS, settings.VALIDATION_RETRY_SECONDS * 2**attempt)


def note_interrupted(version_id: int, exc: BaseException, delay: float) -> None:
    """Log (once per outage, see :class:`DependencyWatch`) that validations
    meet a dependency's failure, and the retry at DEBUG."""
    cause = outages.transient_cause(exc) or exc
    _watch(outages.dependency_name(cause)).failed(cause, "validations are retried with back-off, never FAILED for it")
    logger.debug("validation of version id %s interrupted (%s); retry in %.1f s", version_id, cause, delay)


def _note_through() -> None:
    for watch in list(_watches.values()):
        watch.ok()


def version_validate(version_id: int, resume: bool = False):
    """Validate an UPLOADED version (with ``resume``, also one left
    VALIDATING by an interrupted attempt): VALIDATING, then READY with its
    signature and validation log, or FAILED with the reason (and the log of
    the steps that passed). Returns the version (None when it was deleted);
    a version in another state is left alone, so running it twice is harmless.

    Raises ValidationInterrupted (or the database's OperationalError) when a
    dependency fails: retry later (:func:`validate_here`, the Celery task's
    retries, the reaper :func:`~models_store.registry.services.states.hold_stale`); the version is never FAILED for it.
    """
    version = selectors.version_by_id(version_id)
    if version is None or not (version.state == State.UPLOADED or (resume and version.state == State.VALIDATING)):
        return version
    validator = _validator
    where = validator.describe()
    states.transition(version=version, change="validate", log=[f"validating on {where}"])
    log: list[str] = [f"validated on {where}"]
    try:
        config = config_from_raw(version.model.config)
        path = validator.artifact(version.artifact, version.sha256)
        signature = validation.validate_artifact(
            path, config, log, list(validator.providers), validator.sharing, version.sha256
        )
    except validation.ValidationError as exc:
        _note_through()  # the dependencies answered: the model itself fails
        return states.transition(version=version, change="fail", reason=str(exc), log=[*log, f"failed: {exc}"])
    except cuda.GPU_BUSY as exc:  # a GPU out of memory (or lost) now: retried later, never FAILED for it
        _hold(version, f"interrupted on {where}: {exc.message}; validation is retried")
        raise ValidationInterrupted(exc.message) from exc
    except Exception as exc:  # never leave a version VALIDATING
        cause = outages.transient_cause(exc)
        if cause is not None:
            _hold(version, f"interrupted on {where}: {outages.dependency_name(cause)} failed "
                      f"({type(cause).__name__}); validation is retried")  # fmt: skip
            raise ValidationInterrupted(f"{type(cause).__name__}: {cause}") from exc
        logger.exception("validation of version %s crashed", version_id)
        reason = f"internal error during validation ({type(exc).__name__}); see the server log"
        return states.transition(version=version, change="fail", reason=reason, log=[*log, f"failed: {reason}"])
    validated = states.transition(  # None: deleted while it was validated
        version=version,
        change="ready",
        log=log,
        signature={
            "inputs": [tensor_json(t) for t in signature.inputs],
            "outputs": [tensor_json(t) for t in signature.outputs],
            "properties": signature.properties,
        },
    )
    _note_through()
    return validated


def _hold(version, line: str) -> None:
    """UPLOADED again after an interrupted validation, with ``line`` in its
    log; when the database itself is away the version stays VALIDATING."""
    try:
        states.transition(version=version, change="hold", note=line)
    except Exception as exc:  # the database is away too: the retry resumes the VALIDATING version
        logger.debug("could not put version id %s back to UPLOADED: %s", version.pk, exc)


def validate_here(version_id: int, attempt: int = 0):
    """Validate in this process (the embedded server, a front end without
    validating workers); when a dependency fails, retry in this process
    after :func:`retry_delay` (a timer thread), until the version is READY
    or FAILED (the reaper takes over if the process ends meanwhile)."""
    try:
        return version_validate(version_id, resume=attempt > 0)
    except Exception as exc:
        if not (isinstance(exc, ValidationInterrupted) or outages.transient(exc)):
            raise
        delay = retry_delay(attempt)
        note_interrupted(version_id, exc, delay)
        timer = threading.Timer(delay, _validate_later, (version_id, attempt + 1))
        timer.daemon = True
        timer.start()
        return None


_background = None  # a one-thread executor, created on first use


def validate_in_background(version_id: int) -> None:
    """Validate in this process but off the request: on one background
    thread per process, so that big models are validated one at a time
    (memory); the reaper re-queues the version if the process ends first."""
    global _background
    if _background is None:
        from concurrent.futures import ThreadPoolExecutor

        _background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="validation")
    _background.submit(_validate_in_background, version_id)


def _validate_in_background(version_id: int) -> None:
    from django.db import connection

    try:
        _validate_later(version_id, 0)
    finally:
        connection.close()  # the thread stays; its connection need not


def _validate_later(version_id: int, attempt: int) -> None:
    try:
        validate_here(version_id, attempt)
    except Exception:
        logger.exception("validation of version id %s crashed", version_id)
    finally:
        close_old_connections()


def tensor_json(tensor) -> dict:
    """A signature tensor as stored on a version: ``{name, datatype, shape}``."""
    return {"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape)}
