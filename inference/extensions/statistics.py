"""Triton's statistics extension, counted across every server process
(https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_statistics.md)."""

from __future__ import annotations

from inference.admission import auth
from inference.observability.statistics import ModelStatistics, StatisticsRecorder
from inference.protocol.errors import PermissionDenied
from inference.serving.registry import ModelRegistry


class StatisticsExtension:
    """Served versions' statistics: the versions from the ``registry``, the
    counts from the ``statistics`` recorder (every process's)."""

    def __init__(self, registry: ModelRegistry, statistics: StatisticsRecorder):
        self.registry = registry
        self.statistics = statistics

    def model_statistics(
        self, name: str | None = None, version: str | None = None, token: str | None = None
    ) -> list[ModelStatistics]:
        """Statistics across all server processes: of every served version
        (no name), of a model's served versions, or of one version. While
        tokens are required, only of the models the token may see. Raises
        ModelNotFound, PermissionDenied."""
        registry = self.registry
        models = registry.models  # first: token scopes follow the registry
        visible = auth.visible_models(token)
        if name:
            if visible is not None and not visible(name):
                raise PermissionDenied(f"the token may not see model '{name}'")
            model = registry.model(name)
            if version:
                keys = [(name, registry.version(name, version).number)]
            else:
                keys = [(name, n) for n in sorted(model.served)]
        else:
            keys = [
                (m.name, n) for m in models.values() if visible is None or visible(m.name) for n in sorted(m.served)
            ]
        return self.statistics.read(keys)
