"""The model runner: the only code that calls ``session.run``.

One :class:`ModelRunner` per process serves the in-process executor (every
REST and gRPC process) and the inference workers alike. For each model
version it is asked to run, it loads ``instances`` ONNX Runtime sessions (the
instance group's ``count``: Triton's model instances) from an injected
loader, keeps them under a memory budget (least recently used versions are
unloaded first), and runs each request on an idle instance:

- without dynamic batching, a request waits for an idle instance (in
  arrival order) and runs alone;
- with dynamic batching (:mod:`inference.runtime.batching`), requests are
  queued and the instances run them in batches;
- with sequence batching (:mod:`inference.runtime.sequence_batcher`), the
  requests of each sequence run in order on one instance, with the control
  inputs and implicit state the server supplies.

Deadlines (``time.monotonic()`` seconds) are guarded here, in one place: a
request whose deadline passes while it waits is not run
(DEADLINE_EXCEEDED), and a running ``session.run`` that outlives it is
stopped through ``RunOptions.terminate`` by the deadline watchdog.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import numpy as np

from inference.protocol.errors import DeadlineExceeded, InferenceError, InvalidInput, ModelNotReady
from inference.runtime.batching import DynamicBatcher
from inference.runtime.execution import RunResult, RunTarget, execute, now_ns
from inference.runtime.onnx import OnnxModel
from inference.runtime.sequence_batcher import SequenceBatcher
from inference.runtime.sequences import SequenceRequest

logger = logging.getLogger(__name__)


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
        sequence: SequenceRequest | None = None,
    ) -> RunResult:  # fmt: skip
        if self.sequencer is not None:
            if sequence is None:
                raise InvalidInput(f"{self.target.describe()} uses sequence batching: send a sequence_id")
            return self.sequencer.submit(feeds, output_names, deadline, sequence)
        if self.batcher is not None:
            return self.batcher.submit(feeds, output_names, rows, deadline)
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


class ModelRunner:
    """Loads model versions on demand and runs requests on them (module doc).

    ``load(target)`` returns one new :class:`OnnxModel` (a session) for the
    target; it is called ``target.instances`` times. ``budget_bytes``
    (0: none) bounds the estimated memory of loaded versions,
    ``cost_factor`` x artifact size x instances each; the version being
    loaded always fits. ``on_change(loaded)`` is told the number of loaded
    versions and each load's duration (metrics).
    """

    def __init__(
        self,
        load: Callable[[RunTarget], OnnxModel],
        budget_bytes: int = 0,
        cost_factor: float = 2.0,
        on_load: Callable[[RunTarget, float], None] | None = None,
        on_change: Callable[[int], None] | None = None,
        drain_seconds: float = 0.0,
    ):
        """``drain_seconds``: how long a version that stopped serving keeps
        its sessions (:meth:`retain`), so that requests routed to it before
        the change, by any process, still run on it."""
        self._load = load
        self.budget = budget_bytes
        self.cost_factor = cost_factor
        self._on_load = on_load
        self._on_change = on_change
        self.drain_seconds = drain_seconds
        self._loaded: dict[tuple, LoadedVersion] = {}
        self._lock = threading.Lock()
        self._loading: dict[tuple, threading.Lock] = {}
        self._serving: set | None = None  # the keys of the last retain()
        self._draining: dict[tuple, float] = {}  # key -> when it is unloaded (time.monotonic())
        self._sweeper: threading.Timer | None = None

    # -- running ---------------------------------------------------------
    def run(
        self, target: RunTarget, feeds: dict[str, np.ndarray], output_names: list[str], rows: int = 1,
        deadline: float | None = None, sequence: SequenceRequest | None = None,
    ) -> RunResult:  # fmt: skip
        """Run one request of ``rows`` batch rows on ``target`` (loading it
        first if needed; ``sequence``: its place in a sequence, for a model
        with sequence batching). Raises ModelNotReady when it cannot load,
        DeadlineExceeded, InvalidInput (inputs the model refuses, a sequence
        not started)."""
        version = self._loaded.get(target.key)
        if version is None or version.target != target:
            version = self._get(target)
        version.last_used = time.monotonic()
        return version.run(feeds, output_names, rows, deadline, sequence)

    def _get(self, target: RunTarget) -> LoadedVersion:
        with self._lock:
            lock = self._loading.setdefault(target.key, threading.Lock())
        with lock:
            version = self._loaded.get(target.key)
            if version is not None and version.target == target:
                return version
            started = time.perf_counter()
            try:
                instances = [self._load(target) for _ in range(max(1, target.instances))]
            except InferenceError:
                raise
            except Exception as exc:
                logger.exception("loading %s failed", target.describe())
                raise ModelNotReady(f"{target.describe()} failed to load: {exc}") from None
            seconds = time.perf_counter() - started
            cost = int(target.size * self.cost_factor * len(instances))
            fresh = LoadedVersion(target, instances, cost)
            with self._lock:
                if self.budget:
                    self._evict(self.budget - cost, keep=target.key)
                old = self._loaded.get(target.key)
                self._loaded[target.key] = fresh
                count = len(self._loaded)
                retiring = self._serving is not None and target.key not in self._serving
                if retiring:  # loaded for a request routed before it stopped serving: it drains too
                    self._draining.setdefault(target.key, time.monotonic() + self.drain_seconds)
            if retiring:
                self._sweep()
            if old is not None:  # its instance group or batching changed
                old.close()
            logger.info(
                "loaded %s/%s (%d instance%s%s) in %.1f ms",
                target.model, target.version, len(instances), "" if len(instances) == 1 else "s",
                ", sequence batching" if target.sequence else ", dynamic batching" if target.batching else "",
                seconds * 1e3,
            )  # fmt: skip
            if self._on_load:
                self._on_load(target, seconds)
            if self._on_change:
                self._on_change(count)
            return fresh

    def _evict(self, room: int, keep: tuple) -> None:
        """Unload least recently used versions until the others use <= ``room``
        (lock held); versions holding sequences (whose state would be lost) last."""
        while True:
            others = [v for k, v in self._loaded.items() if k != keep]
            if not others or sum(v.cost for v in others) <= room:
                return
            oldest = min(others, key=lambda v: (v.sequences > 0, v.last_used))
            del self._loaded[oldest.target.key]
            oldest.close()
            logger.info("unloaded %s version %s (memory budget)", oldest.target.model, oldest.target.version)

    # -- housekeeping ----------------------------------------------------
    def retain(self, keys: set) -> None:
        """The versions of ``keys`` serve; every other loaded version is
        unloaded once it has drained (``drain_seconds`` after it stopped
        serving; at once without a drain)."""
        now = time.monotonic()
        with self._lock:
            self._serving = set(keys)
            for key in self._loaded:
                if key in keys:
                    self._draining.pop(key, None)
                else:
                    self._draining.setdefault(key, now + self.drain_seconds)
        self._sweep()

    def _sweep(self) -> None:
        """Unload the versions whose drain is over; come back for the next."""
        now = time.monotonic()
        with self._lock:
            due = [k for k, until in self._draining.items() if until <= now]
            for key in due:
                del self._draining[key]
                version = self._loaded.pop(key, None)
                self._loading.pop(key, None)
                if version is not None:
                    version.close()
                    logger.info("unloaded %s version %s (no longer serving)", key[0], key[1])
            count = len(self._loaded)
            later = min(self._draining.values(), default=None)
            if later is not None and self._sweeper is None:
                self._sweeper = threading.Timer(max(0.0, later - now) + 0.01, self._swept)
                self._sweeper.daemon = True
                self._sweeper.start()
        if due and self._on_change:
            self._on_change(count)

    def _swept(self) -> None:
        with self._lock:
            self._sweeper = None
        self._sweep()

    def loaded(self) -> list[RunTarget]:
        """Targets of the loaded versions, least recently used first."""
        with self._lock:
            return [v.target for v in sorted(self._loaded.values(), key=lambda v: v.last_used)]

    @property
    def used(self) -> int:
        """Estimated bytes of the loaded versions."""
        with self._lock:
            return sum(v.cost for v in self._loaded.values())

    def close(self) -> None:
        with self._lock:
            for version in self._loaded.values():
                version.close()
            self._loaded.clear()
