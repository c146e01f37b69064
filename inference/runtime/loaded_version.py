"""One loaded model version in the model runner (:mod:`inference.runtime.runner`):
its ONNX Runtime sessions (the instance group's model instances), how a
request gets one (an idle instance, in arrival order, within its deadline),
and its dynamic or sequence batcher when the model configures one.
"""

from __future__ import annotations

import threading
import time

from inference.protocol.errors import DeadlineExceeded, InvalidInput
from inference.runtime.batching import DynamicBatcher
from inference.runtime.execution import RunResult, RunTarget, execute, now_ns
from inference.runtime.onnx import OnnxModel
from inference.runtime.queue_policy import Schedule
from inference.runtime.sequences.batcher import SequenceBatcher
from inference.runtime.sequences.policy import SequenceRequest


class LoadedVersion:
    """A model version's instances: idle ones on a stack, and its batcher.

    The idle instances are a stack, so the one used last is used next: at low
    concurrency one instance does all the work and its memory stays in the
    CPU's caches (taking turns between two sessions of a 0.9 ms CNN cost
    about 1 ms per request here). ``list.pop``/``append`` are atomic, so an
    idle instance is taken without a lock; only a request that finds none
    waits on the condition.
    """

    def __init__(self, target: RunTarget, instances: list[OnnxModel], cost: int):
        self.target = target
        self.instances = instances
        self.cost = cost
        self.last_used = time.monotonic()
        self._idle: list[OnnxModel] = list(instances)
        self._cond = threading.Condition()
        self._waiting = 0
        self.sequencer = SequenceBatcher(target, instances) if target.sequence else None
        self.batcher = DynamicBatcher(target, instances) if target.batching and not self.sequencer else None

    def _acquire(self, deadline: float | None) -> OnnxModel:
        try:
            return self._idle.pop()
        except IndexError:
            pass
        with self._cond:
            self._waiting += 1
            try:
                while True:
                    try:
                        return self._idle.pop()  # checked again now that a release will notify
                    except IndexError:
                        pass
                    timeout = None if deadline is None else deadline - time.monotonic()
                    if timeout is not None and timeout <= 0:
                        raise DeadlineExceeded(
                            "the request's deadline passed while it waited for an instance of the model; it was not run"
                        )
                    self._cond.wait(timeout)
            finally:
                self._waiting -= 1

    def _release(self, instance: OnnxModel) -> None:
        self._idle.append(instance)
        if self._waiting:
            with self._cond:
                self._cond.notify()

    def run(
        self, feeds: dict, output_names: list[str], rows: int, deadline: float | None,
        sequence: SequenceRequest | None = None, schedule: Schedule | None = None,
    ) -> RunResult:  # fmt: skip
        """Run one request: through the sequence batcher, the dynamic batcher
        (at the level of its ``schedule``: priority and timeout parameters),
        or on an idle instance."""
        if self.sequencer is not None:
            if sequence is None:
                raise InvalidInput(f"{self.target.describe()} uses sequence batching: send a sequence_id")
            return self.sequencer.submit(feeds, output_names, deadline, sequence)
        if self.batcher is not None:
            return self.batcher.submit(feeds, output_names, rows, deadline, schedule)
        queued = now_ns()
        instance = self._acquire(deadline)
        started = now_ns()
        try:
            outputs = execute(instance, feeds, output_names, deadline)
        finally:
            self._release(instance)
        return RunResult(outputs, rows, True, started - queued, now_ns() - started)

    @property
    def sequences(self) -> int:
        """Sequences it holds (sequence batching; 0 otherwise)."""
        return self.sequencer.active if self.sequencer is not None else 0

    def close(self) -> None:
        if self.batcher is not None:
            self.batcher.close()
        if self.sequencer is not None:
            self.sequencer.close()
