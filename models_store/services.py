"""Writes to the model registry. Each write runs in a transaction and bumps the
change stamp in it, so that every server process sees the change.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import F

from models_store.config import TritonConfig
from models_store.models import ModelVersion, RegisteredModel, RegistryStamp, VersionLabel, label_validator
from models_store.signals import registry_changed


class RegistryError(ValueError):
    """A registry write was refused; the message says why."""


def _bump_stamp() -> None:
    """Advance the change stamp inside the current transaction."""
    updated = RegistryStamp.objects.filter(pk=1).update(counter=F("counter") + 1)
    if not updated:
        RegistryStamp.objects.get_or_create(pk=1, defaults={"counter": 1})
    transaction.on_commit(lambda: registry_changed.send(sender=RegistryStamp))


@transaction.atomic
def model_upsert(name: str, config: TritonConfig | None = None) -> RegisteredModel:
    """Create the model ``name`` if needed; apply a Triton config when given."""
    model, created = RegisteredModel.objects.select_for_update().get_or_create(name=name)
    if config is not None:
        model.max_batch_size = config.max_batch_size
        model.version_policy = config.policy
        model.latest_versions = config.latest_versions
        model.specific_versions = list(config.specific_versions)
        model.instance_group = list(config.instance_group)
        model.config = config.raw
        model.save()
    if created or config is not None:
        _bump_stamp()
    return model


@transaction.atomic
def version_create(
    model: RegisteredModel,
    *,
    artifact: str,
    sha256: str,
    size: int,
    state: str,
    inputs: list | None = None,
    outputs: list | None = None,
    properties: dict | None = None,
    reason: str = "",
    source: str = "",
    preferred_number: int | None = None,
) -> ModelVersion:
    """Add a version. Its number is ``preferred_number`` when that is above
    every number the model has used, else the next number (never reused).

    Raises RegistryError when the model already has a version with these bytes.
    """
    locked = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    existing = locked.versions.filter(sha256=sha256).first()
    if existing is not None:
        raise RegistryError(f"model '{locked.name}' already has these bytes as version {existing.number}")
    number = locked.last_version_number + 1
    if preferred_number is not None and preferred_number > locked.last_version_number:
        number = preferred_number
    locked.last_version_number = number
    locked.save(update_fields=["last_version_number", "updated_at"])
    version = ModelVersion.objects.create(
        model=locked,
        number=number,
        artifact=artifact,
        sha256=sha256,
        size=size,
        state=state,
        inputs=inputs or [],
        outputs=outputs or [],
        properties=properties or {},
        reason=reason,
        source=source,
    )
    _bump_stamp()
    return version


@transaction.atomic
def version_set_state(version: ModelVersion, state: str, reason: str = "") -> ModelVersion:
    version.state = state
    version.reason = reason
    version.save(update_fields=["state", "reason", "updated_at"])
    _bump_stamp()
    return version


@transaction.atomic
def version_delete(version: ModelVersion) -> None:
    """Delete a version row; its artifact directory is removed after commit
    unless another version (of another model) still uses it. The number is
    not reused."""
    from models_store import storage

    artifact = version.artifact
    version.delete()
    _bump_stamp()
    if not ModelVersion.objects.filter(artifact=artifact).exists():
        transaction.on_commit(lambda: storage.remove_artifact(artifact))


@transaction.atomic
def label_set(model: RegisteredModel, name: str, number: int) -> VersionLabel:
    """Point label ``name`` at version ``number``; the version must be READY.

    Raises RegistryError for a malformed name, a missing version, or a
    version that is not READY.
    """
    from django.core.exceptions import ValidationError

    try:
        label_validator(name)
    except ValidationError as exc:
        raise RegistryError(exc.messages[0]) from None
    version = model.versions.filter(number=number).first()
    if version is None:
        raise RegistryError(f"model '{model.name}' has no version {number}")
    if version.state != ModelVersion.State.READY:
        raise RegistryError(
            f"label '{name}' may only point at a READY version; version {number} of '{model.name}' is {version.state}"
        )
    label, _ = VersionLabel.objects.update_or_create(model=model, name=name, defaults={"version": version})
    _bump_stamp()
    return label


@transaction.atomic
def label_delete(model: RegisteredModel, name: str) -> bool:
    """Remove a label; False when the model has no such label."""
    deleted, _ = VersionLabel.objects.filter(model=model, name=name).delete()
    if deleted:
        _bump_stamp()
    return bool(deleted)


@transaction.atomic
def model_set_loaded(model: RegisteredModel, loaded: bool) -> RegisteredModel:
    """Load or unload a model (Triton's repository extension): an unloaded
    model serves no version in any process; its versions stay stored."""
    locked = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    if locked.loaded != loaded:
        locked.loaded = loaded
        locked.save(update_fields=["loaded", "updated_at"])
        _bump_stamp()
    return locked


@transaction.atomic
def model_set_policy(
    model: RegisteredModel, policy: str, latest: int = 1, specific: list[int] | None = None
) -> RegisteredModel:
    """Change a model's version policy. Raises RegistryError for an unknown
    policy or a latest count below 1."""
    from models_store.version_policy import served_versions

    try:
        served_versions(policy, [], latest, specific or [])
    except ValueError as exc:
        raise RegistryError(str(exc)) from None
    locked = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    locked.version_policy = policy
    locked.latest_versions = latest
    locked.specific_versions = list(specific or [])
    locked.save(update_fields=["version_policy", "latest_versions", "specific_versions", "updated_at"])
    _bump_stamp()
    return locked


INSTANCE_KINDS = ("KIND_AUTO", "KIND_GPU", "KIND_CPU")


@transaction.atomic
def model_set_instance_group(model: RegisteredModel, groups: list[dict]) -> RegisteredModel:
    """Replace a model's instance groups (Triton's ``instance_group``): each
    ``{"kind": KIND_AUTO|KIND_GPU|KIND_CPU, "count": n >= 1, "gpus": [ints]}``
    (``gpus`` only for KIND_GPU). Raises RegistryError for anything else."""
    clean = []
    for index, group in enumerate(groups):
        kind = group.get("kind", "KIND_AUTO")
        if kind not in INSTANCE_KINDS:
            raise RegistryError(f"instance group {index}: kind must be one of {', '.join(INSTANCE_KINDS)}")
        count = group.get("count", 1)
        gpus = group.get("gpus", [])
        if type(count) is not int or count < 1:
            raise RegistryError(f"instance group {index}: count must be a positive integer")
        if not isinstance(gpus, list) or any(type(g) is not int or g < 0 for g in gpus):
            raise RegistryError(f"instance group {index}: gpus must be a list of GPU numbers")
        if gpus and kind != "KIND_GPU":
            raise RegistryError(f"instance group {index}: gpus are only for KIND_GPU")
        clean.append({"name": group.get("name", ""), "kind": kind, "count": count, "gpus": gpus})
    locked = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    locked.instance_group = clean
    locked.save(update_fields=["instance_group", "updated_at"])
    _bump_stamp()
    return locked
