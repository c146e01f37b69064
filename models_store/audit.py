"""The audit log: who changed what, when.

Services call :func:`record` inside the transaction of the change, so an
event exists exactly when the change committed. ``actor`` None means the
system (a management command, an import, a Celery task).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import QuerySet

SYSTEM = "system"


class AuditEvent(models.Model):
    """Who changed what, when. Written by the services in the transaction of
    the change; ``actor_name`` keeps the name after a user is deleted and
    ``model_name`` after a model is."""

    actor = models.ForeignKey(settings.AUTH_USER_MODEL, related_name="+", null=True, on_delete=models.SET_NULL)
    actor_name = models.CharField(max_length=150)
    action = models.CharField(max_length=32, db_index=True)
    model = models.ForeignKey(
        "models_store.RegisteredModel", related_name="audit_events", null=True, blank=True, on_delete=models.SET_NULL
    )
    model_name = models.CharField(max_length=128, blank=True, db_index=True)
    version_number = models.PositiveIntegerField(null=True, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        target = self.model_name + (f":{self.version_number}" if self.version_number else "")
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {target}".strip()


def actor_name(actor) -> str:
    """The name the log keeps for ``actor`` (a user; None: the system)."""
    return actor.get_username() if actor is not None else SYSTEM


def record(actor, action: str, model=None, version: int | None = None, **detail) -> AuditEvent:
    """Write one audit event: ``action`` such as ``version.upload``, on
    ``model`` (a RegisteredModel, and version number ``version``), with JSON-able ``detail``."""
    return AuditEvent.objects.create(
        actor=actor if actor is not None and actor.pk else None,
        actor_name=actor_name(actor),
        action=action,
        model=model,
        model_name=model.name if model is not None else "",
        version_number=version,
        detail=detail,
    )


def for_model(model) -> QuerySet[AuditEvent]:
    """The audit events of a model, newest first, as a lazy query to slice
    (also those of its deleted versions; not those of a deleted model that had
    the same name, perhaps another team's: the admin's audit log keeps those)."""
    return AuditEvent.objects.filter(model=model).order_by("-created_at", "-id")
