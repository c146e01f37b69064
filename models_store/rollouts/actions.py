"""What people do to rollouts, shared by the web UI and the management API:
look up the model (NotFound also for a model the caller may not see, as the
registry's actions), check that the user (through an API token when given)
may change it (the same permission as moving a version label), call one
service. Errors: NotFound (404: no such model or rollout), AccessDenied
(403), RegistryError (400), Conflict (409)."""

from __future__ import annotations

from models_store.accounts import selectors as accounts
from models_store.errors import NotFound
from models_store.identifiers import MAX_ROW_ID
from models_store.registry import selectors as registry
from models_store.rollouts import selectors, services


def visible_model(user, token, name: str):
    """The model ``name`` if ``user`` (through ``token``) may see it; NotFound otherwise."""
    model = registry.model_get(name)
    if model is None or not accounts.can_see_model(user, model, token):
        raise NotFound(f"unknown model '{name}'")
    return model


def rollout_get(user, token, name: str, rollout_id: int):
    """The model's rollout ``rollout_id`` (NotFound: none with this id for this model)."""
    model = visible_model(user, token, name)
    found = selectors.rollout_of(model, rollout_id) if 0 < rollout_id <= MAX_ROW_ID else None
    if found is None:
        raise NotFound(f"model '{name}' has no rollout {rollout_id}")
    return found


def rollout_start(user, token, name: str, canary_version: int, **options):
    """Start a rollout of version ``canary_version`` (``options``: see services.rollout_start)."""
    model = visible_model(user, token, name)
    accounts.require_change_model(user, model, token, "rollout.manage")
    return services.rollout_start(model=model, canary_version=canary_version, actor=user, **options)


_CHANGES = {
    "pause": services.rollout_pause,
    "resume": services.rollout_resume,
    "promote": services.rollout_promote,
    "abort": services.rollout_abort,
}
#: What a person may do to a rollout.
CHANGES = tuple(_CHANGES)


def rollout_change(user, token, name: str, rollout_id: int, change: str):
    """Pause, resume, promote now or abort (``change``, one of :data:`CHANGES`) a rollout of the model."""
    rollout = rollout_get(user, token, name, rollout_id)
    accounts.require_change_model(user, rollout.model, token, "rollout.manage")
    return _CHANGES[change](rollout=rollout, actor=user)
