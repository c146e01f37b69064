"""Triton's model configuration extension
(https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_model_configuration.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inference import model_config

if TYPE_CHECKING:
    from inference.dataplane import DataPlane


def config(plane: DataPlane, name: str, version: str | None = None) -> dict:
    """Triton's model configuration of a model as JSON-ready data, as
    Triton returns it (inference/model_config.py). The signature is the
    given version's, else the default version's (the registry's lookup,
    as for metadata). Raises ModelNotFound (an unknown model or version, a
    version that is not a number), ModelNotReady (no version named and
    none serves: Triton's "has no available versions")."""
    model = plane.registry.model(name)
    entry = plane.registry.version(name, version)
    gpus = plane.executor.gpus()  # what KIND_AUTO resolves to
    return model_config.render(model, entry, gpus)
