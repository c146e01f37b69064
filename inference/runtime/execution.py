"""What the model runner works with: run targets, results, one guarded ``session.run``.

Shared by :mod:`inference.runtime.runner` and :mod:`inference.runtime.batching`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import onnxruntime as ort

from inference.protocol.errors import DeadlineExceeded
from inference.runtime.deadlines import watchdog
from inference.runtime.onnx import OnnxModel
from inference.runtime.queue_policy import ONE_QUEUE, PriorityLevels

if TYPE_CHECKING:
    from inference.runtime.sequences.policy import SequencePolicy

now_ns = time.perf_counter_ns


@dataclass(frozen=True)
class BatchingPolicy:
    """Triton's ``dynamic_batching`` with the model's ``max_batch_size``.

    ``preferred_batch_sizes``: batch sizes sent as soon as they can be formed;
    ``max_queue_delay_us``: how long the oldest queued request may wait for a
    fuller batch (microseconds, 0: send what is queued at once);
    ``preserve_ordering``: answers leave in the order requests arrived;
    ``levels``: priority levels and queue policies
    (:mod:`inference.runtime.queue_policy`). ``max_batch_size`` 0: a model
    without a batch dimension, queued for its levels and policies, each
    request run alone (as Triton's dynamic batcher runs one).
    """

    max_batch_size: int
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = 0
    preserve_ordering: bool = False
    levels: PriorityLevels = ONE_QUEUE


@dataclass(frozen=True, slots=True)
class RunTarget:
    """What the runner needs to know about a model version."""

    model: str
    version: int
    sha256: str
    artifact: str  # where the artifact source finds it
    size: int  # bytes, for the memory budget
    instances: int = 1  # sessions (model instances) to run it on
    batching: BatchingPolicy | None = None
    sequence: SequencePolicy | None = None  # sequence batching (then ``batching`` is unused)
    extensions: bool = False  # the sessions register ONNX Runtime Extensions' operators
    warmup: tuple = ()  # model_warmup's samples, run on each instance at load (inference/runtime/warmup.py)
    always_loaded: bool = False  # the operator's choice: loaded at start, never unloaded for the budget

    @property
    def key(self) -> tuple[str, int, str]:
        return (self.model, self.version, self.sha256)

    def describe(self) -> str:
        return f"version {self.version} of model '{self.model}'"

    @property
    def seats(self) -> int:
        """Requests of it one runner runs at once: its instances, times its
        ``max_batch_size`` with dynamic batching (a batch forms from
        requests that wait together); 0 with sequence batching (each
        sequence holds its slot: see :mod:`inference.admission.fair_share`), and 0
        with priority levels or a queue policy: the batcher's queues order
        and bound what waits, as in Triton (:mod:`inference.runtime.queue_policy`)."""
        if self.sequence is not None or (self.batching is not None and self.batching.levels.configured):
            return 0
        rows = self.batching.max_batch_size if self.batching is not None else 1
        return max(1, self.instances) * max(1, rows)


@dataclass(slots=True)
class RunResult:
    """One request's outputs and how it ran (for the statistics extension).

    ``batch_size``: rows of the execution the request ran in; ``executed``:
    true for exactly one request per execution (the one that counts it);
    ``queue_ns``: time waiting for an instance or a batch; ``infer_ns``: the
    execution's ``session.run`` time; ``form_ns``: concatenating a dynamic
    batch's inputs before it (0 without batching). ``written``: outputs a
    worker wrote into the request's shared-memory regions, name -> (shape,
    bytes written); their ``outputs`` entries are None.
    """

    outputs: list[np.ndarray]
    batch_size: int
    executed: bool
    queue_ns: int
    infer_ns: int
    form_ns: int = 0
    written: dict | None = None


def execute(model: OnnxModel, feeds: dict, output_names: list[str], deadline: float | None) -> list[np.ndarray]:
    """``session.run`` under the deadline watchdog (None: no deadline).

    Raises DeadlineExceeded when the deadline has passed already or passes
    while the model runs, InvalidInput for inputs the model refuses.
    """
    if deadline is None:
        return model.run(feeds, output_names)
    if time.monotonic() >= deadline:
        raise DeadlineExceeded("the request's deadline passed before the model ran")
    options = ort.RunOptions()
    options.log_severity_level = 4  # a terminated run is expected here, not an error to log
    token = watchdog.watch(deadline, options)
    try:
        return model.run(feeds, output_names, options)
    finally:
        watchdog.done(token)


def await_result(pending, deadline: float | None, lock, withdraw: Callable[[], None], where: str) -> RunResult:
    """Wait for the result of a queued request (``pending``: its ``done``
    event, ``taken``, ``result`` and ``error``; a batcher's). When its
    deadline passes before a batch took it, ``withdraw()`` takes it out of
    its queue (under ``lock``) and DeadlineExceeded says it was not run
    (``where``: "queued for a batch", ...); once taken, the run's deadline
    watchdog bounds the wait. Raises the error of a failed run."""
    timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
    if not pending.done.wait(timeout):
        with lock:
            if not pending.taken:
                withdraw()
                raise DeadlineExceeded(f"the request's deadline passed while it was {where}; it was not run")
        pending.done.wait()  # its batch is running: the watchdog bounds it
    if pending.error is not None:
        raise pending.error
    return pending.result
