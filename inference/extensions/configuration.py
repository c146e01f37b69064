"""Triton's model configuration extension
(https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_model_configuration.md)."""

from __future__ import annotations

from inference.executor import Executor
from inference.serving import model_config
from inference.serving.registry import ModelRegistry


class ConfigurationExtension:
    """Models' configurations from the ``registry``, instance groups
    resolved to the devices the ``executor`` runs models on."""

    def __init__(self, registry: ModelRegistry, executor: Executor):
        self.registry = registry
        self.executor = executor

    def config(self, name: str, version: str | None = None) -> dict:
        """Triton's model configuration of a model as JSON-ready data, as
        Triton returns it (inference/serving/model_config.py). The signature is the
        given version's, else the default version's (the registry's lookup,
        as for metadata). Raises ModelNotFound (an unknown model or version, a
        version that is not a number), ModelNotReady (no version named and
        none serves: Triton's "has no available versions")."""
        model = self.registry.model(name)
        entry = self.registry.version(name, version)
        gpus = self.executor.gpus()  # what KIND_AUTO resolves to
        return model_config.render(model, entry, gpus)
