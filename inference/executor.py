"""The executor port: what the data plane needs from whatever runs a model
version, declared here by the door that uses it.

Two implementations: :class:`~inference.runtime.executors.InProcessExecutor`
(``INFERENCE_EXECUTOR=inprocess``: ONNX Runtime in the server process) and
:class:`~inference.workers.client.executor.RemoteExecutor` (``workers``: inference
workers over the worker link). The data plane, the ensemble runs, the
fair-share gates, the configuration extension and the composition root use
an executor only through :class:`Executor`; a remote one (``remote`` true)
also answers :class:`WorkerExecutor`'s calls: a run awaited on an event loop
and consecutive ensemble steps run on one worker. Nothing probes an executor
for what it has: ``remote`` says it.

Times: ``deadline`` is ``time.monotonic()`` seconds (None: the executor's
default timeout); tensors are numpy arrays by name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

    from inference.runtime.execution import RunResult, RunTarget
    from inference.workers.client.answers import SegmentRun


class Executor(Protocol):
    """Runs model versions for the data plane."""

    #: True for an executor whose runs happen in another process (a worker): it
    #: records their trace spans and reads and writes shared-memory regions
    #: itself, and it is a :class:`WorkerExecutor`. False: runs happen here.
    remote: bool

    def start(self) -> None:
        """Start background work (worker mode: the directory of workers, the connection pool)."""

    def on_snapshot(self, snapshot: dict) -> None:
        """Registry listener: the snapshot (model name -> ModelEntry) that now
        serves; an in-process executor drops the sessions of versions that
        no longer serve."""

    def gpus(self) -> tuple[int, ...]:
        """The GPU numbers models run on (none: the CPU), for what ``KIND_AUTO`` resolves to."""

    def seats(self, target: RunTarget, placement: tuple = ()) -> int:
        """Requests of ``target`` this process runs at once: its fair-share
        gate's seats (:mod:`inference.admission.fair_share`; 0: not gated).
        ``placement``: the model's instance group."""

    def blocks(self, target: RunTarget) -> bool:
        """Whether a run of ``target`` waits on something other than the
        calling thread (a batch, a sequence's turn, a worker): an event loop
        must not make it inline."""

    def run(
        self, target: RunTarget, feeds: dict[str, np.ndarray], output_names: list[str], rows: int = 1,
        deadline: float | None = None, placement: tuple = (), sequence=None, schedule=None,
    ) -> RunResult:  # fmt: skip
        """Run one request of ``rows`` rows (``placement``: the model's
        instance group; ``sequence``: a SequenceRequest for a model with
        sequence batching; ``schedule``: a queue_policy.Schedule, the
        request's priority and timeout). Raises the protocol's errors
        (DeadlineExceeded, ModelNotReady, InvalidInput, ...)."""


class WorkerExecutor(Executor, Protocol):
    """An executor whose runs happen on inference workers (``remote`` is True)."""

    def run(
        self, target: RunTarget, feeds: dict[str, np.ndarray], output_names: list[str], rows: int = 1,
        deadline: float | None = None, placement: tuple = (), sequence=None, regions=None, schedule=None,
        shadow: bool = False,
    ) -> RunResult:  # fmt: skip
        """:meth:`Executor.run`; ``regions``: a RegionPlan of the request's
        tensors in shared-memory regions, which a worker on this machine
        reads and writes itself; ``shadow``: a shadow copy, which the worker
        runs only while it runs no other request (else QueueFull)."""

    async def run_async(
        self, target: RunTarget, feeds: dict[str, np.ndarray], output_names: list[str], rows: int = 1,
        deadline: float | None = None, placement: tuple = (), sequence=None, regions=None, schedule=None,
    ) -> RunResult:  # fmt: skip
        """:meth:`run` awaited on an event loop (the gRPC front end): no thread per request."""

    def segment_workers(self, placements: list) -> list:
        """The live workers that serve a device every instance group of ``placements`` allows."""

    def run_segment(
        self, steps: list, feeds: dict[str, np.ndarray], returns: list[str], deadline: float | None, placements: list
    ) -> SegmentRun:
        """Run consecutive ensemble ``steps`` ((RunTarget, input map, output
        map) each) in order on one worker, on ``feeds``; the answer holds the
        ``returns`` tensors (:mod:`inference.ensembles.segments`)."""
