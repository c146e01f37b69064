"""Validation of uploaded versions (the service the validation task runs):
UPLOADED -> VALIDATING -> READY or FAILED, each step in the version's log.

Where it runs is this process's :class:`Validator`, set by the composition
root: in an inference worker (``manage.py runworker``) the worker's host and
device, its execution providers (so a GPU worker warms the model up on its
GPU) and its artifact cache (the artifact is fetched from the storage
backend into ``WORKER_CACHE_DIR/<sha256>/``, where inference will find it);
elsewhere the server process, with the model store's local copy. The
version's log says where: ``queued ...`` while it waits (UPLOADED),
``validating on ...`` (VALIDATING), ``validated on ...`` then each step.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.db import transaction

from models_store import audit, storage, validation
from models_store.config import config_from_raw
from models_store.models import ModelVersion
from models_store.stamp import bump_stamp

logger = logging.getLogger(__name__)

State = ModelVersion.State


@dataclass(frozen=True)
class Validator:
    """Where this process validates versions: ``where`` (for the version's
    log), ONNX Runtime ``providers`` (names or ``(name, options)`` pairs) and
    ``cache_dir``: fetch artifacts into ``cache_dir/<sha256>/`` (a worker's
    cache), or None for the model store's local copy (MODEL_STORE_DIR)."""

    where: str = ""
    providers: tuple = ("CPUExecutionProvider",)
    cache_dir: Path | None = None

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


def configure(validator: Validator | None = None, queue_note: Callable[[], str] | None = None) -> None:
    """Set where this process validates, and how the upload answer describes
    who will take a queued validation (``queue_note()``: e.g. "2 inference
    workers take validation tasks", or that none is running)."""
    global _validator, _queue_note
    if validator is not None:
        _validator = validator
    if queue_note is not None:
        _queue_note = queue_note


def current_validator() -> Validator:
    return _validator


def queued_log(queue: str) -> list[str]:
    """The log of a version whose validation was queued: where it waits, and who takes it."""
    try:
        note = _queue_note()
    except Exception as exc:  # describing the queue must never fail an upload
        note = f"who takes it is unknown ({type(exc).__name__})"
    return [f"queued for validation on queue {queue}: {note}"]


def version_validate(version_id: int) -> ModelVersion | None:
    """Validate an UPLOADED version: VALIDATING, then READY with its
    signature and validation log, or FAILED with the reason (and the log of
    the steps that passed). Returns the version (None when it was deleted);
    a version in another state is left alone, so running it twice is harmless.
    """
    version = ModelVersion.objects.select_related("model").filter(pk=version_id).first()
    if version is None or version.state != State.UPLOADED:
        return version
    validator = _validator
    where = validator.describe()
    version_set_state(version, State.VALIDATING, log=[f"validating on {where}"])
    log: list[str] = [f"validated on {where}"]
    try:
        config = config_from_raw(version.model.config)
        path = validator.artifact(version.artifact, version.sha256)
        signature = validation.validate_artifact(path, config, log, providers=list(validator.providers))
    except validation.ValidationError as exc:
        return _version_validated(version_id, State.FAILED, reason=str(exc), log=[*log, f"failed: {exc}"])
    except Exception as exc:  # never leave a version VALIDATING
        logger.exception("validation of version %s crashed", version_id)
        reason = f"internal error during validation ({type(exc).__name__}); see the server log"
        return _version_validated(version_id, State.FAILED, reason=reason, log=[*log, f"failed: {reason}"])
    return _version_validated(
        version_id,
        State.READY,
        log=log,
        inputs=[tensor_json(t) for t in signature.inputs],
        outputs=[tensor_json(t) for t in signature.outputs],
        properties=signature.properties,
    )


def tensor_json(tensor) -> dict:
    """A signature tensor as stored on a version: ``{name, datatype, shape}``."""
    return {"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape)}


@transaction.atomic
def _version_validated(version_id: int, state: str, *, log: list[str], reason: str = "", **signature):
    version = ModelVersion.objects.select_for_update().select_related("model").filter(pk=version_id).first()
    if version is None:  # deleted while it was validated
        return None
    version.state, version.reason, version.log = state, reason, log
    for key, value in signature.items():
        setattr(version, key, value)
    version.save()
    action = "version.ready" if state == State.READY else "version.failed"
    audit.record(None, action, version.model, version.number, reason=reason)
    bump_stamp()
    return version


@transaction.atomic
def version_set_state(
    version: ModelVersion, state: str, reason: str = "", log: list[str] | None = None
) -> ModelVersion:
    """Set a version's state (and reason; and its log when given), bumping the change stamp."""
    version.state = state
    version.reason = reason
    fields = ["state", "reason", "updated_at"]
    if log is not None:
        version.log = log
        fields.append("log")
    version.save(update_fields=fields)
    bump_stamp()
    return version
