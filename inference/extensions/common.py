"""What the extensions share: following the registry before a credential is
checked, and the audit of the changes they make."""

from __future__ import annotations

from inference.ports import container
from inference.serving.registry import ModelRegistry


def follow_scopes(registry: ModelRegistry) -> None:
    """Bring the registry (and the token scopes, a registry listener) up to
    date before a credential is checked: reading ``registry.models`` follows
    the change beacon."""
    registry.models  # noqa: B018


def audit(caller, action: str, model_name: str, **detail) -> None:
    """Record ``action`` by ``caller.actor`` in the installed audit log (none: nothing)."""
    if container.audit_log is not None:
        container.audit_log.record(caller.actor, action, model_name, **detail)
