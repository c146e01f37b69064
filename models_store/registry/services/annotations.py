"""What people say of models and versions: their descriptions and tags
(:mod:`models_store.registry.tags`). These change nothing that serves, so
they bump no change stamp; each change is audited with its actor
(``model.tags``, ``version.update``)."""

from __future__ import annotations

from django.db import transaction

from models_store import audit
from models_store.registry import tags as tag_rules
from models_store.registry.models import ModelVersion, RegisteredModel


@transaction.atomic
def model_set_tags(*, model: RegisteredModel, tags: dict, actor) -> RegisteredModel:
    """Replace the tags of ``model`` with ``tags`` (key -> value strings);
    RegistryError (400) for a tag :func:`models_store.registry.tags.validate`
    refuses. Audited ``model.tags`` (with the tags before and after) when they change."""
    clean = tag_rules.validate(tags)
    locked = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    if clean != locked.tags:
        before = locked.tags
        locked.tags = clean
        locked.save(update_fields=["tags", "updated_at"])
        audit.record(actor, "model.tags", locked, before=before, tags=clean)
    return locked


@transaction.atomic
def version_annotate(
    *, version: ModelVersion, actor, description: str | None = None, tags: dict | None = None
) -> ModelVersion:
    """Change the description and/or the tags (replaced whole) of ``version``
    (None: unchanged); RegistryError (400) for a description over
    :data:`~models_store.registry.tags.MAX_DESCRIPTION` characters or a refused
    tag, and then nothing changes. Audited ``version.update`` with what changed."""
    changes: dict = {}
    if description is not None:
        changes["description"] = tag_rules.check_description(description)
    if tags is not None:
        changes["tags"] = tag_rules.validate(tags)
    locked = ModelVersion.objects.select_for_update().select_related("model").get(pk=version.pk)
    changes = {key: value for key, value in changes.items() if getattr(locked, key) != value}
    if changes:
        for key, value in changes.items():
            setattr(locked, key, value)
        locked.save(update_fields=[*changes, "updated_at"])
        audit.record(actor, "version.update", locked.model, version=locked.number, **changes)
    return locked
