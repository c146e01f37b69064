"""Reads of the model registry. Services write; selectors read."""

from __future__ import annotations

from django.db.models import QuerySet

from models_store.models import ModelVersion, RegisteredModel, RegistryStamp


def model_get(name: str) -> RegisteredModel | None:
    """The registered model called ``name``, or None."""
    return RegisteredModel.objects.filter(name=name).first()


def model_list() -> QuerySet[RegisteredModel]:
    return RegisteredModel.objects.order_by("name")


def version_list(model: RegisteredModel) -> QuerySet[ModelVersion]:
    """A model's versions, highest number first."""
    return model.versions.order_by("-number")


def version_get(model: RegisteredModel, number: int) -> ModelVersion | None:
    return model.versions.filter(number=number).first()


def version_by_sha256(model: RegisteredModel, sha256: str) -> ModelVersion | None:
    return model.versions.filter(sha256=sha256).first()


def registry_snapshot() -> list[RegisteredModel]:
    """Every model with its versions and labels prefetched (three queries), for the serving registry."""
    return list(RegisteredModel.objects.prefetch_related("versions", "labels__version").order_by("name"))


def stamp_get() -> int:
    """The registry's change counter (0 before the first write)."""
    return RegistryStamp.objects.filter(pk=1).values_list("counter", flat=True).first() or 0
