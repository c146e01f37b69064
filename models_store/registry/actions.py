"""What people do to the registry, shared by the web UI and the management API.

Each action looks up its target, checks that the user (through an API token
when given) may do it (the permission table, :mod:`models_store.accounts.permissions`), and calls
one service, so that both refuse the same things with the same messages
(:mod:`models_store.errors`): NotFound (404: no such model, version or
label; also, when tokens are required, a model the caller may not see:
:func:`visible_model`), AccessDenied (403), RegistryError (400: malformed)
and its subclass Conflict (409: refused by the registry's current state,
e.g. a version policy that would serve nothing, a version label on a FAILED
version). Uploads are :mod:`models_store.intake.services`' (``upload``).
"""

from __future__ import annotations

from django.db import transaction

from models_store.accounts import selectors as accounts
from models_store.errors import NotFound
from models_store.identifiers import MAX_VERSION_NUMBER
from models_store.registry import selectors
from models_store.registry.models import ModelVersion, RegisteredModel
from models_store.registry.services import annotations, routes, shadow, versions
from models_store.registry.services import models as model_services


def visible_model(user, token, name: str, *, prefetched: bool = False) -> RegisteredModel:
    """The model called ``name`` if ``user`` (through ``token``, an ApiToken
    or None) may see it (:func:`~models_store.accounts.selectors.can_see_model`);
    NotFound otherwise, the same answer as for a model that does not exist,
    so a team cannot probe other teams' model names when tokens are
    required. ``prefetched``: with its versions and labels (a page, a detail answer)."""
    model = selectors.model_detail(name) if prefetched else selectors.model_get(name)
    if model is None or not accounts.can_see_model(user, model, token):
        raise NotFound(f"unknown model '{name}'")
    return model


def get_version(model: RegisteredModel, number: int) -> ModelVersion:
    """The model's version ``number``; NotFound also for a number no version
    can have (beyond the registry's 32-bit version numbers)."""
    version = selectors.version_get(model, number) if 0 < number <= MAX_VERSION_NUMBER else None
    if version is None:
        raise NotFound(f"model '{model.name}' has no version {number}")
    return version


def _changeable_model(user, token, name: str, action: str) -> RegisteredModel:
    """The model if ``user`` (through ``token``) may see it and do ``action``
    to it (:mod:`models_store.accounts.permissions`): NotFound, AccessDenied."""
    model = visible_model(user, token, name)
    accounts.require_change_model(user, model, token, action)
    return model


def update_model(
    user,
    token,
    name: str,
    *,
    description: str | None = None,
    policy: dict | None = None,
    instance_group: list[dict] | None = None,
    payload_logging: dict | None = None,
    force: bool = False,
    tags: dict | None = None,
):
    """Change the description, the tags (``tags``: replaced whole), the version policy (``policy``: keys
    ``version_policy``, ``latest_versions``, ``specific_versions``), the
    instance group (where worker mode runs the model) and/or payload logging
    (``payload_logging``: keys ``payload_log_rate``, ``payload_log_max_bytes``):
    all of them or, when one is refused, none. ``force``: past the signature guard."""
    model = _changeable_model(user, token, name, "model.update")
    with transaction.atomic():
        if payload_logging:
            rate = payload_logging.get("payload_log_rate", model.payload_log_rate)
            max_bytes = payload_logging.get("payload_log_max_bytes", model.payload_log_max_bytes)
            if (rate, max_bytes) != (model.payload_log_rate, model.payload_log_max_bytes):
                model = model_services.model_set_payload_logging(
                    model=model, rate=rate, max_bytes=max_bytes, actor=user
                )
        if instance_group is not None and instance_group != model.instance_group:
            model = model_services.model_set_instance_group(model=model, groups=instance_group, actor=user)
        if policy:
            model = model_services.model_set_policy(
                model=model,
                policy=policy.get("version_policy", model.version_policy),
                latest=policy.get("latest_versions", model.latest_versions),
                specific=policy.get("specific_versions", model.specific_versions),
                actor=user,
                force=force,
            )
        if description is not None and description != model.description:
            model = model_services.model_update(model=model, actor=user, description=description)
        if tags is not None:
            model = annotations.model_set_tags(model=model, tags=tags, actor=user)
    return model


def annotate_version(
    user, token, name: str, number: int, *, description: str | None = None, tags: dict | None = None
) -> ModelVersion:
    """Change the description and/or the tags of version ``number`` (None: unchanged; ``version.update``)."""
    model = _changeable_model(user, token, name, "version.update")
    return annotations.version_annotate(
        version=get_version(model, number), actor=user, description=description, tags=tags
    )


def delete_model(user, token, name: str) -> None:
    """Delete the model ``name`` with its versions and their artifacts
    (:func:`~models_store.registry.services.models.model_delete`): NotFound,
    AccessDenied (``model.delete``), Conflict (409) while something uses it."""
    model = _changeable_model(user, token, name, "model.delete")
    model_services.model_delete(model=model, actor=user)


def set_label(user, token, name: str, label: str, number: int, force: bool = False):
    model = _changeable_model(user, token, name, "label.set")
    return routes.label_set(model=model, name=label, number=number, actor=user, force=force)


def delete_label(user, token, name: str, label: str) -> None:
    model = _changeable_model(user, token, name, "label.delete")
    if not routes.label_delete(model=model, name=label, actor=user):
        raise NotFound(f"model '{name}' has no version label '{label}'")


def set_traffic(user, token, name: str, weights: dict[str, int], force: bool = False) -> RegisteredModel:
    model = _changeable_model(user, token, name, "traffic.set")
    return routes.traffic_set(model=model, weights=weights, actor=user, force=force)


def promote_canary(user, token, name: str, force: bool = False) -> RegisteredModel:
    model = _changeable_model(user, token, name, "traffic.promote")
    return routes.traffic_promote(model=model, actor=user, force=force)


def rollback_canary(user, token, name: str) -> RegisteredModel:
    model = _changeable_model(user, token, name, "traffic.rollback")
    return routes.traffic_rollback(model=model, actor=user)


def set_shadow(user, token, name: str, number: int, percent: float) -> RegisteredModel:
    model = _changeable_model(user, token, name, "shadow.set")
    return shadow.shadow_set(model=model, number=number, percent=percent, actor=user)


def clear_shadow(user, token, name: str) -> bool:
    model = _changeable_model(user, token, name, "shadow.set")
    return shadow.shadow_clear(model=model, actor=user)


def retire_version(user, token, name: str, number: int, force: bool = False) -> ModelVersion:
    model = _changeable_model(user, token, name, "version.retire")
    return versions.version_retire(version=get_version(model, number), actor=user, force=force)


def restore_version(user, token, name: str, number: int) -> ModelVersion:
    model = _changeable_model(user, token, name, "version.restore")
    return versions.version_restore(version=get_version(model, number), actor=user)


def delete_version(user, token, name: str, number: int, force: bool = False) -> None:
    model = _changeable_model(user, token, name, "version.delete")
    versions.version_delete(version=get_version(model, number), actor=user, force=force)


def promote_version(user, token, name: str, number: int, force: bool = False) -> ModelVersion:
    model = _changeable_model(user, token, name, "version.promote")
    return versions.version_promote(version=get_version(model, number), actor=user, force=force)
