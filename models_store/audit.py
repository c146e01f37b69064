"""The audit log: who changed what, when.

Services call :func:`record` inside the transaction of the change, so an
event exists exactly when the change committed. ``actor`` None means the
system (a management command, an import, a Celery task).
"""

from __future__ import annotations

from models_store.models import AuditEvent, RegisteredModel

SYSTEM = "system"


def record(
    actor,
    action: str,
    model: RegisteredModel | None = None,
    version: int | None = None,
    **detail,
) -> AuditEvent:
    """Write one audit event: ``action`` such as ``version.upload``, on
    ``model`` (and version number ``version``), with JSON-able ``detail``."""
    return AuditEvent.objects.create(
        actor=actor if actor is not None and actor.pk else None,
        actor_name=actor.get_username() if actor is not None else SYSTEM,
        action=action,
        model=model,
        model_name=model.name if model is not None else "",
        version_number=version,
        detail=detail,
    )
