"""Triton's model configuration extension
(https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_model_configuration.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inference import model_config
from inference.protocol import triton_texts
from inference.registry import parse_version
from inference.snapshot import ModelEntry, VersionEntry

if TYPE_CHECKING:
    from inference.dataplane import DataPlane


def config(plane: DataPlane, name: str, version: str | None = None) -> dict:
    """Triton's model configuration of a model as JSON-ready data, as
    Triton returns it (inference/model_config.py). The signature is the
    given version's, else the default version's, else the newest
    version's. Raises ModelNotFound (an unknown model or version),
    InvalidInput (a version that is not a number)."""
    model = plane.registry.model(name)
    gpus = plane.executor.gpus()  # what KIND_AUTO resolves to
    return model_config.render(model, _version(model, version), gpus)


def _version(model: ModelEntry, version: str | None) -> VersionEntry | None:
    if version:
        number = parse_version(version)
        if number not in model.versions:
            raise triton_texts.unknown_version(model.name, number, list(model.versions))
        return model.versions[number]
    if model.default is not None:
        return model.default
    return model.versions[max(model.versions)] if model.versions else None
