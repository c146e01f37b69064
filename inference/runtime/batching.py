"""Dynamic batching with Triton's semantics (``dynamic_batching`` in config.pbtxt).

Requests for one model version queue here; each model instance has a thread
that takes the oldest request and the requests queued after it that can
join it (same datatypes, same non-batch dimensions, same requested outputs),
concatenates them along dimension 0, runs them once, and splits the outputs
back by rows. A batch is sent

- at once when it reaches ``max_batch_size`` rows, or one of the
  ``preferred_batch_sizes`` (the largest one the queue can fill);
- otherwise when the oldest request has waited ``max_queue_delay_us``
  (with 0, whatever is queued goes at once: batching then only gathers the
  requests that arrived while every instance was busy).

A request that cannot join (another shape, or more rows than the batch has
room for) waits for a later batch. A failed run fails only the requests in
it, each with the error. A request whose deadline passes while it is
queued answers DEADLINE_EXCEEDED and is not run. With
``preserve_ordering`` answers are released in arrival order.

Priority levels and queue policies (:mod:`inference.runtime.queue_policy`):
the queue is one per level, and batches are formed in service order (the
highest level first; in a level, arrival order, then the requests delayed
by their queue timeout), so a batch starts with the highest-priority
request and takes lower ones only to fill its room. A request over its
level's ``max_queue_size`` is refused at once (QueueFull, UNAVAILABLE); one
whose queue timeout passes before a batch took it is refused (REJECT:
UNAVAILABLE "Request timeout expired", when the timeout passes, even while
every instance is busy) or moved behind its level's others (DELAY).

Statistics (Triton's): each request reports the rows of the execution it
ran in; exactly one request per execution reports the execution.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from inference.protocol.errors import DeadlineExceeded, InferenceError, ModelNotReady
from inference.runtime.execution import RunResult, RunTarget, await_result, execute, now_ns
from inference.runtime.onnx import OnnxModel
from inference.runtime.queue_policy import PriorityQueue, Schedule, timed_out

logger = logging.getLogger(__name__)

#: The longest a batcher thread or a caller sleeps at once (threading's waits refuse far longer timeouts).
MAX_WAIT = 3600.0


@dataclass(eq=False, slots=True)
class _Pending:
    feeds: dict[str, np.ndarray]
    output_names: list[str]
    rows: int
    deadline: float | None  # time.monotonic()
    signature: tuple
    seq: int
    enqueued_ns: int
    enqueued: float  # time.monotonic()
    done: threading.Event = field(default_factory=threading.Event)
    taken: bool = False
    level: int = 0  # set by the PriorityQueue, with expires (queue timeout, time.monotonic()), rejects, delayed
    expires: float | None = None
    rejects: bool = True
    delayed: bool = False
    result: RunResult | None = None
    error: InferenceError | None = None


def _signature(feeds: dict[str, np.ndarray], output_names: list[str]) -> tuple:
    """Requests with equal signatures can share a batch."""
    return tuple((name, a.dtype.str, a.shape[1:]) for name, a in sorted(feeds.items())) + tuple(output_names)


class DynamicBatcher:
    """Queues requests of one model version and runs them in batches on
    ``instances`` (one thread each). See the module docstring."""

    def __init__(self, target: RunTarget, instances: list[OnnxModel]):
        policy = target.batching
        self.target = target
        self.max_rows = max(1, policy.max_batch_size)
        self.preferred = tuple(sorted({p for p in policy.preferred_batch_sizes if 0 < p <= self.max_rows}))
        self.delay = policy.max_queue_delay_us / 1e6
        self.preserve_ordering = policy.preserve_ordering
        self._cond = threading.Condition()
        self._queue = PriorityQueue(policy.levels, target.describe())
        self._seq = 0
        self._closed = False
        # preserve_ordering: finished requests not yet released, by sequence number, and the next to release
        self._waiting: dict[int, _Pending] = {}
        self._next_release = 0
        self._threads = [
            threading.Thread(target=self._serve, args=(instance,), name=f"batcher-{target.model}", daemon=True)
            for instance in instances
        ]
        for thread in self._threads:
            thread.start()

    # -- callers ---------------------------------------------------------
    def submit(
        self, feeds: dict[str, np.ndarray], output_names: list[str], rows: int, deadline: float | None,
        schedule: Schedule | None = None,
    ):  # fmt: skip
        """Queue one request of ``rows`` rows at the level of its
        ``schedule`` (priority and timeout parameters; None: the default
        level) and wait for its RunResult.

        Raises QueueFull when its level's queue is full (it is not queued),
        ModelNotReady "Request timeout expired" when its queue timeout
        passes before a batch took it (REJECT), DeadlineExceeded when the
        deadline passes while it is queued (it is then not run) or while
        its batch runs, ModelNotReady when the version is unloaded
        meanwhile, and the error of a failed run.
        """
        with self._cond:
            if self._closed:
                raise ModelNotReady(f"{self.target.describe()} was unloaded")
            pending = _Pending(
                feeds, output_names, rows, deadline, _signature(feeds, output_names), self._seq, now_ns(),
                time.monotonic(),
            )  # fmt: skip
            self._queue.push(pending, schedule)  # raises QueueFull before it takes a place in the order
            self._seq += 1
            self._cond.notify()
        if pending.expires is not None and pending.rejects and (deadline is None or pending.expires < deadline):
            self._await_queue_timeout(pending)

        def withdraw() -> None:
            if self._queue.remove(pending):
                self._finish(pending, at_once=True)

        return await_result(pending, deadline, self._cond, withdraw, "queued for a batch")

    def _await_queue_timeout(self, pending: _Pending) -> None:
        """Wait until ``pending`` (REJECT) ran or its queue timeout passed;
        then refuse it if no batch took it (even while every instance is busy)."""
        while not pending.done.wait(min(MAX_WAIT, max(0.0, pending.expires - time.monotonic()))):
            if time.monotonic() < pending.expires:
                continue
            with self._cond:
                if not pending.taken and self._queue.remove(pending):
                    pending.error = timed_out(self.target.describe())
                    self._finish(pending, at_once=True)
            return

    def close(self) -> None:
        """Stop the threads; queued requests fail with ModelNotReady."""
        with self._cond:
            self._closed = True
            for pending in self._queue.clear():
                pending.error = ModelNotReady(f"{self.target.describe()} was unloaded before it ran")
                self._finish(pending, at_once=True)
            self._cond.notify_all()

    # -- instance threads ------------------------------------------------
    def _serve(self, instance: OnnxModel) -> None:
        while True:
            with self._cond:
                batch = self._form()
            if batch is None:
                return
            self._run(instance, batch)

    def _form(self) -> list[_Pending] | None:
        """The next batch (lock held; waits as the policy says); None once closed."""
        while True:
            while not self._queue and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            self._expire()
            if not self._queue:
                continue
            first = self._queue.first()
            if first.rows >= self.max_rows:  # a full batch by itself
                first.taken = True
                self._queue.remove(first)
                return [first]
            members, rows = self._gather(first, self.max_rows)
            size = self._ready_size(rows)
            if size is None:
                now = time.monotonic()
                wait = first.enqueued + self.delay - now
                if wait > 0:
                    expiry = self._queue.next_expiry()  # the order may change then
                    if expiry is not None:
                        wait = min(wait, max(0.0, expiry - now) + 1e-4)
                    self._cond.wait(min(wait, MAX_WAIT))
                    continue
                size = rows
            if size < rows:
                members, rows = self._gather(first, size)
            for pending in members:
                pending.taken = True
                self._queue.remove(pending)
            return members

    def _gather(self, first: _Pending, limit: int) -> tuple[list[_Pending], int]:
        """``first`` and the queued requests that can join it, in order, up to ``limit`` rows."""
        members, rows = [], 0
        for pending in self._queue:
            if pending.signature == first.signature and rows + pending.rows <= limit:
                members.append(pending)
                rows += pending.rows
                if rows == limit:
                    break
        return members, rows

    def _ready_size(self, rows: int) -> int | None:
        """The batch size to send now, or None to wait for more requests."""
        if rows >= self.max_rows or self.delay <= 0:
            return rows
        fitting = [p for p in self.preferred if p <= rows]
        return fitting[-1] if fitting else None

    def _expire(self) -> None:
        """Apply the queue timeouts that passed (REJECT: refused, DELAY: moved
        behind the others of its level) and fail queued requests whose
        deadline passed (lock held); neither is run."""
        now = time.monotonic()
        for pending in self._queue.expire(now):
            pending.error = timed_out(self.target.describe())
            self._finish(pending, at_once=True)
        for pending in [p for p in self._queue if p.deadline is not None and p.deadline <= now]:
            self._queue.remove(pending)
            pending.error = DeadlineExceeded(
                "the request's deadline passed while it was queued for a batch; it was not run"
            )
            self._finish(pending, at_once=True)

    def _run(self, instance: OnnxModel, batch: list[_Pending]) -> None:
        started = now_ns()
        rows = sum(p.rows for p in batch)
        deadlines = [p.deadline for p in batch]
        deadline = None if None in deadlines else max(deadlines)
        try:
            if len(batch) == 1:
                feeds = batch[0].feeds
            else:
                feeds = {name: np.concatenate([p.feeds[name] for p in batch]) for name in batch[0].feeds}
            formed = now_ns()
            outputs = execute(instance, feeds, batch[0].output_names, deadline)
            infer_ns = now_ns() - formed
            offset = 0
            for index, pending in enumerate(batch):
                end = offset + pending.rows
                pending.result = RunResult(
                    [o[offset:end] for o in outputs] if len(batch) > 1 else outputs,
                    rows, index == 0, started - pending.enqueued_ns, infer_ns, max(1, formed - started),
                )  # fmt: skip
                offset = end
        except InferenceError as exc:
            for pending in batch:
                pending.error = type(exc)(exc.message)
        except Exception as exc:  # never leave a caller waiting
            logger.exception("a batch of %s failed", self.target.describe())
            for pending in batch:
                pending.error = InferenceError(f"the batch failed: {type(exc).__name__}")
        with self._cond:
            for pending in batch:
                self._finish(pending)

    def _finish(self, pending: _Pending, at_once: bool = False) -> None:
        """Release a finished request (lock held), in arrival order with
        preserve_ordering; ``at_once``: one that never ran (refused,
        expired, unloaded) is answered now, and takes its turn in the order."""
        if not self.preserve_ordering or at_once:
            pending.done.set()
            if not self.preserve_ordering:
                return
        self._waiting[pending.seq] = pending
        while self._next_release in self._waiting:
            self._waiting.pop(self._next_release).done.set()
            self._next_release += 1
