"""Celery tasks of the model store. Thin: each calls one service.

Embedded mode (no REDIS_URL): they run eagerly in the process that scheduled
them (after the upload's transaction commits); with REDIS_URL, in a worker.
"""

from __future__ import annotations

from celery import shared_task

from models_store import validating


@shared_task(name="models_store.validate_version", ignore_result=True)  # the state is in the registry
def validate_version(version_id: int) -> str | None:
    """Validate an uploaded version (see validating.version_validate); returns
    its final state, or None when the version was deleted meanwhile."""
    version = validating.version_validate(version_id)
    return version.state if version is not None else None
