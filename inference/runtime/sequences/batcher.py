"""The sequence batcher: Triton's scheduler for stateful models, for one
model version (its policy: :class:`~inference.runtime.sequences.policy.SequencePolicy`).

Semantics (triton-inference-server/core ``src/sequence_batch_scheduler/
sequence_batch_scheduler.cc``):

- A request that starts a sequence (``sequence_start``) takes a free
  sequence slot of one model instance (lowest slot number first), or waits
  in the backlog until one frees. Every later request of the sequence goes
  to that slot, so the sequence runs in order on one instance. A request
  that continues a sequence the batcher does not hold (never started, ended,
  released when idle, or the version was reloaded) is refused: "inference
  request for sequence <id> to model '<m>' must specify the START flag on
  the first request of the sequence". A START for a sequence already held
  restarts it in its slot (its state starts again).
- Each instance has a thread that runs one batch at a time, at most one
  request of each sequence per batch, with the control inputs filled in
  per row (START, END, READY, CORRID) and each sequence's implicit state
  (its previous state output, or the initial state after a START).
  ``direct``: a batch holds slots 0..n of the instance, a slot without a
  request (or whose request cannot join: another shape) as a row with READY
  false; it runs at once, or, with ``max_queue_delay_microseconds`` and
  ``minimum_slot_utilization``, once enough slots are ready or the oldest
  request waited that long. ``oldest``: the oldest requests of the
  instance's candidate sequences that can join, up to ``max_batch_size``,
  as soon as that many or a preferred batch size are ready, else once the
  oldest waited ``max_queue_delay_microseconds``.
- The backlog is bounded per owner (:attr:`SequenceBatcher.backlog_per_owner`,
  ``FAIR_SEQUENCE_BACKLOG``): a START that would be one owner's sequence too
  many waiting for a slot is refused at once (RateLimited: HTTP 429, gRPC
  RESOURCE_EXHAUSTED), so one team's flood of sequences neither grows the
  backlog without end nor holds every server thread.
- A sequence whose last request ended (``sequence_end``) frees its slot for
  the backlog. One with no request for ``max_sequence_idle_microseconds``
  is released the same way (its state dropped).
- Requests whose deadline passes while queued answer DEADLINE_EXCEEDED and
  are not run; a failed run fails its requests and leaves their sequences'
  state as it was.

Sequences belong to their owner (:attr:`SequenceRequest.owner`): the same
correlation ID of another owner is another sequence. Sessions of ONNX
Runtime keep no state of their own, so a sequence's state is the state
tensors kept here.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from inference.protocol.errors import DeadlineExceeded, InferenceError, InvalidInput, ModelNotReady, RateLimited
from inference.runtime.execution import RunResult, RunTarget, await_result, execute, now_ns
from inference.runtime.onnx import OnnxModel
from inference.runtime.sequences.policy import SequencePolicy, SequenceRequest, shown

logger = logging.getLogger(__name__)


@dataclass(eq=False, slots=True)
class _Pending:
    feeds: dict[str, np.ndarray]
    names: list[str]
    deadline: float | None  # time.monotonic()
    request: SequenceRequest
    enqueued: float  # time.monotonic()
    enqueued_ns: int
    done: threading.Event = field(default_factory=threading.Event)
    taken: bool = False
    result: RunResult | None = None
    error: InferenceError | None = None


@dataclass(eq=False, slots=True)
class _Sequence:
    key: tuple
    queue: deque = field(default_factory=deque)
    instance: int = -1  # -1 while in the backlog
    slot: int = -1
    states: dict | None = None  # state input -> array (None: initial state at its first run)
    last_seen: float = 0.0
    ending: bool = False  # its END request is queued or ran: released once it ran
    running: bool = False


def _signature(feeds: dict[str, np.ndarray]) -> tuple:
    """Rows with equal signatures can share a batch."""
    return tuple((name, a.dtype.str, a.shape[1:]) for name, a in sorted(feeds.items()))


def _null_like(array: np.ndarray) -> np.ndarray:
    if array.dtype == object:
        return np.full(array.shape, b"", dtype=object)
    return np.zeros(array.shape, dtype=array.dtype)


class SequenceBatcher:
    """Runs the requests of one model version's sequences on ``instances``
    (one thread each); see the module doc."""

    #: Sequences one owner may have waiting for a slot (set from settings by the composition root).
    backlog_per_owner = 64

    def __init__(self, target: RunTarget, instances: list[OnnxModel]):
        self.target = target
        self.policy: SequencePolicy = target.sequence
        self.instances = instances
        self._cond = threading.Condition()
        self._sequences: dict[tuple, _Sequence] = {}  # held sequences by key, until their END is queued
        self._slots: list[list[_Sequence | None]] = [[None] * self.policy.slots for _ in instances]
        self._free = [(slot, index) for index in range(len(instances)) for slot in range(self.policy.slots)]
        heapq.heapify(self._free)
        self._backlog: deque[_Sequence] = deque()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._serve, args=(i,), name=f"sequences-{target.model}", daemon=True)
            for i in range(len(instances))
        ]
        for thread in self._threads:
            thread.start()

    @property
    def active(self) -> int:
        """Sequences held (in a slot or the backlog)."""
        with self._cond:
            return sum(1 for row in self._slots for s in row if s is not None) + len(self._backlog)

    # -- callers ---------------------------------------------------------------------
    def submit(
        self, feeds: dict[str, np.ndarray], output_names: list[str], deadline: float | None, request: SequenceRequest
    ) -> RunResult:
        """Queue one request of a sequence and wait for its RunResult. Raises
        InvalidInput (a sequence not started), DeadlineExceeded (its
        deadline passed while queued: not run), ModelNotReady (the version
        was unloaded) and the error of a failed run."""
        now = time.monotonic()
        with self._cond:
            if self._closed:
                raise ModelNotReady(f"{self.target.describe()} was unloaded")
            sequence = self._sequences.get(request.key)
            if sequence is None:
                if not request.start:
                    raise InvalidInput(
                        f"inference request for sequence {shown(request.corrid)} to model '{self.target.model}' must "
                        "specify the START flag on the first request of the sequence"
                    )
                if not self._free:
                    self._check_backlog(request.owner)
                sequence = self._sequences[request.key] = _Sequence(request.key)
                self._place(sequence)
            elif request.start:
                logger.warning(
                    "sequence %s for model '%s' has a conflict. The previous sequence did not end before this "
                    "sequence start. Previous sequence will be terminated early.",
                    request.describe(), self.target.model,
                )  # fmt: skip
            sequence.last_seen = now
            pending = _Pending(feeds, output_names, deadline, request, now, now_ns())
            sequence.queue.append(pending)
            if request.end:  # as Triton: the ID is free for a new sequence at once
                del self._sequences[request.key]
                sequence.ending = True
            self._cond.notify_all()

        def withdraw() -> None:
            sequence.queue.remove(pending)
            self._settle(sequence)

        return await_result(pending, deadline, self._cond, withdraw, "queued in its sequence")

    def close(self) -> None:
        """Stop the threads; queued requests fail with ModelNotReady and every sequence is dropped."""
        with self._cond:
            self._closed = True
            held = [s for row in self._slots for s in row if s is not None] + list(self._backlog)
            for sequence in held:
                while sequence.queue:
                    pending = sequence.queue.popleft()
                    pending.error = ModelNotReady(f"{self.target.describe()} was unloaded before it ran")
                    pending.done.set()
            self._sequences.clear()
            self._backlog.clear()
            self._cond.notify_all()

    # -- slots (lock held) -----------------------------------------------------------
    def _check_backlog(self, owner: str) -> None:
        """Raise RateLimited when ``owner`` has as many sequences in the backlog as it may."""
        waiting = sum(1 for s in self._backlog if s.key[0] == owner)
        if waiting >= self.backlog_per_owner:
            who = owner.replace(":", " ", 1) if owner else "anonymous callers"
            raise RateLimited(
                f"{who} already has {waiting} sequences waiting for a sequence slot of {self.target.describe()} "
                f"(at most {self.backlog_per_owner}); end sequences, or retry later",
                1.0,
            )

    def _place(self, sequence: _Sequence) -> None:
        if self._free:
            sequence.slot, sequence.instance = heapq.heappop(self._free)
            self._slots[sequence.instance][sequence.slot] = sequence
        else:
            self._backlog.append(sequence)

    def _release(self, sequence: _Sequence) -> None:
        """Free the sequence's slot for the oldest backlogged sequence (or for a new one)."""
        if self._sequences.get(sequence.key) is sequence:
            del self._sequences[sequence.key]
        index, slot = sequence.instance, sequence.slot
        sequence.instance = sequence.slot = -1
        self._slots[index][slot] = None
        while self._backlog:
            waiting = self._backlog.popleft()
            if waiting.queue or self._sequences.get(waiting.key) is waiting:
                waiting.instance, waiting.slot = index, slot
                self._slots[index][slot] = waiting
                return
        heapq.heappush(self._free, (slot, index))

    def _settle(self, sequence: _Sequence) -> None:
        """After a request of the sequence ran or left its queue unrun (its
        deadline passed): release the sequence once its END ran; drop a
        backlogged one left without requests (Triton drops a backlog whose
        requests expired: the sequence is forgotten)."""
        if sequence.queue or sequence.running:
            return
        if sequence.instance < 0:
            if sequence in self._backlog:
                self._backlog.remove(sequence)
            if self._sequences.get(sequence.key) is sequence:
                del self._sequences[sequence.key]
        elif sequence.ending:
            self._release(sequence)

    def _reap(self, index: int, now: float) -> float | None:
        """Release the instance's idle sequences; seconds until the next may go idle."""
        idle = self.policy.idle_us / 1e6
        wait = None
        for sequence in self._slots[index]:
            if sequence is None or sequence.queue or sequence.running:
                continue
            left = sequence.last_seen + idle - now
            if left <= 0:
                logger.info(
                    "sequence %s of %s idle for %.3f s: released", shown(sequence.key[1]), self.target.describe(), idle
                )
                self._release(sequence)
            else:
                wait = left if wait is None else min(wait, left)
        return wait

    def _expire(self, index: int, now: float) -> None:
        """Fail the instance's queued requests whose deadline passed; they are not run."""
        for sequence in self._slots[index]:
            if sequence is None:
                continue
            for pending in [p for p in sequence.queue if p.deadline is not None and p.deadline <= now]:
                sequence.queue.remove(pending)
                pending.error = DeadlineExceeded("the request's deadline passed while it was queued; it was not run")
                pending.done.set()
            self._settle(sequence)

    # -- instance threads --------------------------------------------------------------
    def _serve(self, index: int) -> None:
        instance = self.instances[index]
        while True:
            with self._cond:
                rows = self._form(index)
            if rows is None:
                return
            self._run(instance, rows)

    def _form(self, index: int) -> list | None:
        """The next batch of the instance (lock held; waits as the policy
        says): (sequence, pending) rows, pending None for a not-ready row
        (direct); None once closed."""
        while True:
            if self._closed:
                return None
            now = time.monotonic()
            self._expire(index, now)
            wait = self._reap(index, now)
            heads = [s for s in self._slots[index] if s is not None and s.queue]
            if heads:
                rows, delay = (self._direct if self.policy.strategy == "direct" else self._oldest)(index, heads, now)
                if rows:
                    for sequence, pending in rows:
                        if pending is not None:
                            sequence.queue.popleft()
                            pending.taken = True
                            sequence.running = True
                    return rows
                wait = delay if wait is None else min(wait, delay)
            deadlines = [p.deadline for s in heads for p in s.queue if p.deadline is not None]
            if deadlines:
                soonest = min(deadlines) - now
                wait = soonest if wait is None else min(wait, soonest)
            self._cond.wait(None if wait is None else max(wait, 0.0005))

    def _direct(self, index: int, heads: list[_Sequence], now: float) -> tuple[list, float]:
        """Slots 0..n of the instance, not-ready rows where a slot has no
        request that can join the first's shapes; or ([], seconds to wait)."""
        policy = self.policy
        oldest = min(s.queue[0].enqueued for s in heads)
        if policy.direct_delay_us and policy.min_slot_utilization:
            waited = now - oldest
            if waited * 1e6 <= policy.direct_delay_us and len(heads) / policy.slots < policy.min_slot_utilization:
                return [], policy.direct_delay_us / 1e6 - waited
        slots = self._slots[index]
        last = max(i for i, s in enumerate(slots) if s is not None and s.queue)
        first = next(s.queue[0] for s in slots if s is not None and s.queue)
        signature = self._row_signature(first, next(s for s in slots if s is not None and s.queue))
        rows = []
        for sequence in slots[: last + 1]:
            head = sequence.queue[0] if sequence is not None and sequence.queue else None
            if head is not None and self._row_signature(head, sequence) != signature:
                head = None  # another shape: its own batch later
            rows.append((sequence, head))
        return rows, 0.0

    def _oldest(self, index: int, heads: list[_Sequence], now: float) -> tuple[list, float]:
        """The oldest requests that can join the oldest's shapes, up to
        ``max_batch_size``; or ([], seconds to wait) for a fuller batch."""
        policy = self.policy
        heads.sort(key=lambda s: s.queue[0].enqueued)
        first = heads[0]
        signature = self._row_signature(first.queue[0], first)
        limit = max(1, policy.max_batch_size)
        rows = [(s, s.queue[0]) for s in heads if self._row_signature(s.queue[0], s) == signature][:limit]
        waited = now - first.queue[0].enqueued
        delay = policy.oldest_delay_us / 1e6
        if len(rows) < limit and delay > waited:
            fitting = [p for p in policy.preferred if p <= len(rows)]
            if not fitting:
                return [], delay - waited
            rows = rows[: fitting[-1]]
        return rows, 0.0

    def _row_signature(self, pending: _Pending, sequence: _Sequence) -> tuple:
        states = self.policy.initial_states() if sequence.states is None or pending.request.start else sequence.states
        return _signature(pending.feeds) + _signature(states) + tuple(pending.names)

    def _run(self, instance: OnnxModel, rows: list) -> None:
        policy = self.policy
        started = now_ns()
        real = [(s, p) for s, p in rows if p is not None]
        model = real[0][1]
        names = list(dict.fromkeys([*model.names, *(st.output_name for st in policy.states)]))
        deadlines = [p.deadline for _, p in real]
        deadline = None if None in deadlines else max(deadlines)
        per_row = []
        for sequence, pending in rows:
            if pending is None:  # not ready: zeros shaped like the batch's first request, a dummy state
                feeds = {name: _null_like(a) for name, a in model.feeds.items()}
                states = {name: _null_like(a) for name, a in self._states_of(real[0][0], model).items()}
                feeds.update(states)
                feeds.update(policy.controls_for(False, False, False, 0))
            else:
                request = pending.request
                feeds = dict(pending.feeds)
                feeds.update(self._states_of(sequence, pending))
                feeds.update(policy.controls_for(request.start, request.end, True, request.corrid))
            per_row.append(feeds)
        error: InferenceError | None = None
        outputs: list[np.ndarray] = []
        infer_ns = form_ns = 0
        try:
            if policy.batched:
                feeds = {name: np.concatenate([row[name] for row in per_row]) for name in per_row[0]}
            else:
                feeds = per_row[0]
            formed = now_ns()
            form_ns = max(1, formed - started)
            outputs = execute(instance, feeds, names, deadline)
            infer_ns = now_ns() - formed
        except InferenceError as exc:
            error = exc
        except Exception as exc:  # never leave a caller waiting
            logger.exception("a sequence batch of %s failed", self.target.describe())
            error = InferenceError(f"the batch failed: {type(exc).__name__}")
        by_name = dict(zip(names, outputs))
        batch = len(rows)
        with self._cond:
            executed = False
            for position, (sequence, pending) in enumerate(rows):
                if pending is None:
                    continue
                sequence.running = False
                if error is not None:
                    pending.error = type(error)(error.message)
                else:
                    pick = slice(position, position + 1) if policy.batched else slice(None)
                    sequence.states = {st.input_name: np.array(by_name[st.output_name][pick]) for st in policy.states}
                    pending.result = RunResult(
                        [by_name[name][pick] for name in pending.names], batch, not executed,
                        started - pending.enqueued_ns, infer_ns, form_ns,
                    )  # fmt: skip
                    executed = True
                if pending.request.end:
                    sequence.ending = True
                self._settle(sequence)
                pending.done.set()
            self._cond.notify_all()

    def _states_of(self, sequence: _Sequence, pending: _Pending) -> dict[str, np.ndarray]:
        """The state inputs of the sequence's next request: the initial state
        at a START (or at its first run), else its last state outputs."""
        if pending.request.start or sequence.states is None:
            return self.policy.initial_states()
        return sequence.states
