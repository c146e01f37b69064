"""Triton's extensions beside inference: the model repository
(:mod:`.repository`), model configuration (:mod:`.configuration`),
statistics (:mod:`.statistics`), system and CUDA shared memory
(:mod:`.shared_memory`), trace and logging settings (:mod:`.settings`).

Each extension is an object built with the collaborators it needs (the
registry, the executor, the statistics recorder, the machine's
shared-memory regions: the same ones the process's data plane was built
with), one method per endpoint, raising only protocol errors; the REST and
gRPC adapters make one call per endpoint and encode what it returns.
:class:`Extensions` holds the five, :func:`get_extensions` the process's.
Calls that change state need a credential and are audited with their actor.

Spec: https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_<name>.md
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from inference.executor import Executor
from inference.extensions.configuration import ConfigurationExtension
from inference.extensions.repository import RepositoryExtension
from inference.extensions.settings import SettingsExtension
from inference.extensions.shared_memory import SharedMemoryExtension
from inference.extensions.statistics import StatisticsExtension
from inference.observability.statistics import StatisticsRecorder
from inference.ports import built_once
from inference.serving.registry import ModelRegistry
from inference.shared_memory.regions import RegionRegistry


@dataclass(frozen=True)
class Extensions:
    """The extensions of one server process."""

    repository: RepositoryExtension
    configuration: ConfigurationExtension
    statistics: StatisticsExtension
    shared_memory: SharedMemoryExtension
    settings: SettingsExtension

    @classmethod
    def over(
        cls,
        *,
        registry: ModelRegistry,
        executor: Executor,
        statistics: StatisticsRecorder,
        regions: RegionRegistry,
        control_mode: str = "",
    ) -> Extensions:
        """The five over these collaborators (the data plane's);
        ``control_mode``: the repository's model control mode (Triton's)."""
        return cls(
            RepositoryExtension(registry, control_mode),
            ConfigurationExtension(registry, executor),
            StatisticsExtension(registry, statistics),
            SharedMemoryExtension(registry, regions),
            SettingsExtension(registry),
        )


#: The process-wide extensions (``get_extensions()``), built on first use by the factory
#: the composition root installed (``container.extensions_factory``), over the same
#: collaborators as the process's data plane.
get_extensions: Callable[[], Extensions] = built_once("extensions_factory", "extensions")
