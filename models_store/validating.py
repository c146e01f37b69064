"""Validation of uploaded versions (the service the validation task runs):
UPLOADED -> VALIDATING -> READY or FAILED, each step in the version's log."""

from __future__ import annotations

import logging

from django.db import transaction

from models_store import audit, storage, validation
from models_store.config import config_from_raw
from models_store.models import ModelVersion
from models_store.stamp import bump_stamp

logger = logging.getLogger(__name__)

State = ModelVersion.State


def version_validate(version_id: int) -> ModelVersion | None:
    """Validate an UPLOADED version: VALIDATING, then READY with its
    signature and validation log, or FAILED with the reason (and the log of
    the steps that passed). Returns the version (None when it was deleted);
    a version in another state is left alone, so running it twice is harmless.
    """
    version = ModelVersion.objects.select_related("model").filter(pk=version_id).first()
    if version is None or version.state != State.UPLOADED:
        return version
    version_set_state(version, State.VALIDATING)
    log: list[str] = []
    try:
        config = config_from_raw(version.model.config)
        signature = validation.validate_artifact(storage.local_artifact(version.artifact), config, log)
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
def version_set_state(version: ModelVersion, state: str, reason: str = "") -> ModelVersion:
    version.state = state
    version.reason = reason
    version.save(update_fields=["state", "reason", "updated_at"])
    bump_stamp()
    return version
