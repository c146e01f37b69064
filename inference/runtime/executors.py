"""Executors: how the data plane runs a model version.

:class:`InProcessExecutor` (the embedded default) runs the model runner in
the server process; :class:`~inference.workers.client.executor.RemoteExecutor` sends
requests to inference workers. Both implement the data plane's
:class:`inference.executor.Executor`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from pathlib import Path

import numpy as np

from inference.runtime import onnx as onnx_runtime
from inference.runtime.execution import RunResult, RunTarget
from inference.runtime.runner import ModelRunner
from inference.runtime.shared_weights import machine_copy


def session_loader(
    artifacts, options=None, providers=None, shared_weights: tuple[Path, int] | None = None, prepack: bool = False
) -> Callable[[RunTarget], onnx_runtime.OnnxModel]:
    """A model runner's loader: one new session of the target's artifact
    (``artifacts``: an :class:`~inference.ports.ArtifactSource`) with the
    given session options and execution providers. ``shared_weights``:
    (directory, minimum bytes): artifacts at least that large load from the
    machine's copy with memory-mapped weights in that directory, shared by
    every process of the machine (:mod:`inference.runtime.shared_weights`);
    ``prepack``: their sessions still pre-pack weights (faster matrix
    products on some models; each session then keeps its packed copy)."""

    def load(target: RunTarget) -> onnx_runtime.OnnxModel:
        path = artifacts.local_path(target.artifact, target.sha256)
        shared = False
        if shared_weights is not None:
            copy = machine_copy(Path(path), target.sha256, *shared_weights)
            path, shared = copy, copy != Path(path) and not prepack
        session = onnx_runtime.create_session(path, options, providers, target.extensions, shared)
        model = onnx_runtime.OnnxModel(session)
        model.directory = Path(artifacts.local_path(target.artifact, target.sha256)).parent  # warm-up files
        return model

    return load


def always_loaded(targets, patterns: tuple[str, ...] = ()) -> list[RunTarget]:
    """The targets whose model the operator keeps loaded: its config's
    ``always_loaded`` parameter (:data:`inference.serving.snapshot.ALWAYS_LOADED_PARAMETER`),
    or a name matching one of ``patterns`` (shell-style, ``fnmatch``: the
    ``SESSIONS_ALWAYS_LOADED`` setting). The targets themselves, unchanged:
    requests name the same ones."""
    return [
        target
        for target in targets
        if target.always_loaded or any(fnmatch.fnmatchcase(target.model, pattern) for pattern in patterns)
    ]


def runnable(snapshot: dict):
    """(model, version) entries of a registry snapshot (model name ->
    :class:`~inference.serving.snapshot.ModelEntry`) whose version serves and runs
    on a model runner (an ensemble's version has no run target: its steps
    run): the sessions an executor or a worker keeps."""
    for model in snapshot.values():
        for version in model.versions.values():
            if version.serving and version.target is not None:
                yield model, version


class InProcessExecutor:
    """Runs sessions in this process (``INFERENCE_EXECUTOR=inprocess``)."""

    #: Runs happen in this process (its trace spans recorded here, shared-memory regions read here).
    remote = False

    def __init__(self, runner: ModelRunner, gpus: tuple[int, ...] = (), always: tuple[str, ...] = ()):
        """``gpus``: the GPU numbers the runner's execution providers use (none:
        CPU only); ``always``: name patterns of the models whose sessions stay
        loaded (:func:`always_loaded`)."""
        self.runner = runner
        self._gpus = tuple(gpus)
        self._always = tuple(always)

    def gpus(self) -> tuple[int, ...]:
        """The GPU numbers models run on in this process (none: the CPU)."""
        return self._gpus

    def start(self) -> None:
        """Nothing to start: sessions load on first use (always-loaded ones with the first snapshot)."""

    def run(
        self, target: RunTarget, feeds: dict[str, np.ndarray], output_names: list[str], rows: int = 1,
        deadline: float | None = None, placement=(), sequence=None, schedule=None,
    ) -> RunResult:  # fmt: skip
        """Run on this process's model runner (``placement`` is for workers;
        ``sequence``: a SequenceRequest for a model with sequence batching;
        ``schedule``: a queue_policy.Schedule, the request's priority and
        timeout, for a model with dynamic batching)."""
        return self.runner.run(target, feeds, output_names, rows, deadline, sequence, schedule)

    def seats(self, target: RunTarget, placement=()) -> int:
        """Requests of ``target`` this process runs at once (its fair-share
        gate's seats, :mod:`inference.admission.fair_share`; 0: not gated)."""
        return target.seats

    def blocks(self, target: RunTarget) -> bool:
        """A batching model waits for its batch (a sequence model for its
        sequence's turn), a version not loaded yet for its load: not on an
        event loop's thread."""
        return target.batching is not None or target.sequence is not None or not self.runner.has(target)

    def on_snapshot(self, snapshot: dict) -> None:
        """Keep only sessions of versions that still serve; load the always-loaded
        ones (the first snapshot's before this returns: before the process serves)."""
        targets = [version.target for _model, version in runnable(snapshot)]
        self.runner.retain({target.key for target in targets})
        self.runner.keep_loaded(always_loaded(targets, self._always))
