"""Shadow traffic: a copy of a share of a model's requests run on its shadow
version, after the live answer and off the request's path.

The data plane, once a request's live answer is computed, draws whether to
copy it (the model's share, one ``random()``) and :meth:`ShadowTraffic.offer`
puts the already-decoded :class:`~inference.protocol.types.InferenceRequest`
and the live outputs, by reference (their arrays are only read), on a
bounded per-process queue (a deque: one append, no lock, no thread woken):
it never waits, encodes or copies a tensor; a full queue drops the copy,
counted. Background threads (started on the first copy, so each server
process has its own after a fork; niced, and polling the queue every
:data:`POLL_SECONDS` when it is empty) take copies from the queue and run
them on the shadow version through the same executor as every request (in
process or on a worker):

- checked against the shadow version's signature as any request
  (:func:`inference.requests.jobs.prepare`; a refusal is a shadow error);
- only in the process's idle time: a copy starts once no live request has
  begun in the process for ``quiet_seconds`` (a quiet spell; the thread
  sleeps, the GIL released, and reads two counters the data plane keeps);
  between its steps (its check and run; its statistics; its comparison)
  it sleeps :data:`YIELD_SECONDS`, so that a live request waiting for the
  GIL takes it, and a live request that began meanwhile sends it back to
  waiting for a quiet spell. A copy that waited :data:`YIELD_MAX_SECONDS`
  in all is not run on but counted ``busy``: under steady load most copies
  are ``busy`` or ``dropped`` (the queue stays full), not run beside the
  live requests. In worker mode the copy is sent marked ``shadow``: the
  worker runs it only while it handles no other request, one copy at a
  time, else answers QUEUE_FULL after a bounded wait, counted ``busy``
  (:meth:`inference.workers.server.runtime.WorkerRuntime.handle`);
- only while the server has room: a copy whose live version has requests
  waiting for its seats, or whose shadow version has no free seat or has
  requests waiting (:mod:`inference.admission.fair_share`), is not run but
  counted ``busy``: a shadow copy never takes a turn from a request, and
  is charged to no caller's rate limit or flow;
- counted in the shadow version's own statistics (transport ``shadow`` in
  the charts' rollups), its answer discarded;
- compared with the live outputs per output name
  (:mod:`inference.shadow.comparison`), into per-minute rollups
  (:mod:`inference.shadow.rollups`) written to a store every
  ``flush_seconds`` (:mod:`inference.shadow.rollups_db`).

Requests of a sequence, and requests with tensors in shared-memory regions
(which the client may overwrite once answered), are never copied.
Counted in ``modelhost_shadow_requests_total{model, version, outcome}``.
Times: ``deadline`` on ``time.monotonic()``; durations ns.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass

from inference.admission.fair_share import FairShare
from inference.executor import Executor
from inference.observability.metrics import SHADOW_REQUESTS
from inference.observability.outage import DependencyWatch
from inference.observability.rollups import TRANSPORT
from inference.observability.statistics import StatisticsRecorder, failure_reason
from inference.protocol.errors import InferenceError, QueueFull
from inference.requests import jobs
from inference.serving.snapshot import VersionEntry
from inference.shadow.comparison import OutputComparison, compare
from inference.shadow.rollups import BUSY, DROPPED, ShadowRollups
from inference.shared_memory.regions import RegionRegistry

logger = logging.getLogger(__name__)

_now = time.perf_counter_ns
#: The transport shadow runs count under in the charts' rollups.
SHADOW_TRANSPORT = "shadow"
#: The niceness of the shadow threads (Linux: per thread): the live requests' threads come first for the CPU.
NICENESS = 19
#: How often an idle shadow thread looks at the queue (s): the request path never wakes a thread (that
#: wake-up, measured, cost the live answer more than the copy's own work); copies wait about half of it.
POLL_SECONDS = 0.002
#: ... and after a second without copies, this often (a model whose shadow traffic ended costs no wake-ups).
IDLE_POLL_SECONDS = 0.05
#: Between its steps a copy sleeps this long (the GIL released: a live request waiting for it takes it); a live
#: request that began meanwhile sends it back to waiting for a quiet spell (ShadowSettings.quiet_seconds) ...
YIELD_SECONDS = 0.00005
#: ... for at most this long in all (s); a copy that would wait longer is not run on (counted ``busy``).
YIELD_MAX_SECONDS = 0.05
#: A copy waiting for a quiet spell sleeps at most this many quiet spells at a time.
_QUIET_SPELLS = 8
#: The owner of shadow runs (sequences are never copied; this names no caller).
_OWNER = "shadow"


@dataclass(frozen=True)
class ShadowSettings:
    """``capacity``: copies waiting per process (beyond: dropped and
    counted); ``threads``: shadow threads per process; ``store``: where the
    rollups go (``write(writer, cells)``; None: kept in memory only);
    ``flush_seconds``: how often they are written; ``quiet_seconds``: how
    long no live request must have begun in the process before a copy
    starts (or goes on after a live request interrupted it);
    ``wait_seconds``: how long in all a copy may wait for quiet spells
    before it is not run (counted ``busy``)."""

    capacity: int = 64
    threads: int = 1
    store: object = None
    flush_seconds: float = 10.0
    quiet_seconds: float = 0.001
    wait_seconds: float = YIELD_MAX_SECONDS


class ShadowTraffic:
    """This process's shadow queue and threads (see the module doc)."""

    def __init__(
        self, settings: ShadowSettings, executor: Executor, fair: FairShare, statistics: StatisticsRecorder,
        regions: RegionRegistry, timeout_seconds: float = 0.0, live=None, began=None,
    ):  # fmt: skip
        """``live``: says whether a live request runs in this process now; ``began``: a number that changes
        whenever one begins (a copy runs its steps, its check and run, its statistics, its comparison, only in
        a quiet spell of both; None: always quiet)."""
        self.settings = settings
        self.executor = executor
        self.fair = fair
        self.statistics = statistics
        self.regions = regions
        self.timeout_seconds = timeout_seconds
        self.live = live
        self.began = began
        self.rollups = ShadowRollups()
        self.capacity = max(1, settings.capacity)
        #: Copies waiting (appended by the request path, taken by the shadow threads: deque's own atomicity).
        self.queue: deque = deque()
        self._running = 0  # copies the shadow threads hold (under _lock)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._flushed = time.monotonic()
        self._stop = threading.Event()
        self._watch = DependencyWatch("the shadow comparisons' database", logger)

    # -- on the request's path -------------------------------------------------
    def offer(self, entry: VersionEntry, shadow: VersionEntry, request, names: list, outputs) -> bool:
        """Queue a copy of ``request`` for ``shadow`` (``entry``: the live version; ``names``, ``outputs``:
        the live run's output names and arrays). Never blocks; False when the queue is full (counted)."""
        if not self._threads:
            self._start()
        if len(self.queue) >= self.capacity:
            self._skipped(shadow, DROPPED)
            return False
        self.queue.append((entry, shadow, request, names, outputs))  # no lock, no wake-up
        return True

    def _skipped(self, shadow: VersionEntry, why: str) -> None:
        self.rollups.skipped(time.time(), shadow.model_name, shadow.number, why)
        SHADOW_REQUESTS.labels(shadow.model_name, shadow.version, why).inc()

    # -- the shadow threads ------------------------------------------------------
    def _start(self) -> None:
        with self._lock:
            if self._threads:
                return
            for n in range(max(1, self.settings.threads)):
                thread = threading.Thread(target=self._work, name=f"shadow-{n}", daemon=True)
                thread.start()
                self._threads.append(thread)
            if self.settings.store is not None:
                atexit.register(self._last_flush)

    def _work(self) -> None:
        TRANSPORT.set(SHADOW_TRANSPORT)
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICENESS)
        except (OSError, AttributeError):
            pass
        last = time.monotonic()
        while not self._stop.is_set():
            try:
                with self._lock:
                    item = self.queue.popleft()
                    self._running += 1
            except IndexError:
                item = None
                self._stop.wait(POLL_SECONDS if time.monotonic() - last < 1.0 else IDLE_POLL_SECONDS)
            else:
                last = time.monotonic()
            if item is not None:
                try:
                    self.run(*item)
                except Exception:  # a bug must not end the thread
                    logger.exception("a shadow copy failed")
                finally:
                    with self._lock:
                        self._running -= 1
            if self.settings.store is not None and time.monotonic() - self._flushed >= self.settings.flush_seconds:
                self.flush()

    def run(self, entry: VersionEntry, shadow: VersionEntry, request, names: list, outputs) -> None:
        """Run one copy on ``shadow`` and count its comparison with the live ``outputs`` (in this thread)."""
        budget = [self.settings.wait_seconds]
        if self._busy(entry) or shadow.target is None or not self._yield(budget, self.settings.quiet_seconds):
            self._skipped(shadow, BUSY)
            return
        gate = self.fair.gate(shadow.target, shadow.instance_group)
        if gate is not None and not gate.try_enter():  # a free seat and nobody waiting, or not at all
            self._skipped(shadow, BUSY)
            return
        model, number, started = shadow.model_name, shadow.number, _now()
        options = {"shadow": True} if self.executor.remote else {}  # a worker runs it only while idle
        try:
            try:
                job = jobs.prepare(shadow, request, started, _OWNER, "", self.timeout_seconds, self.regions,
                                   self.executor.remote)  # fmt: skip
                run = self.executor.run(
                    shadow.target, job.feeds, job.names, job.rows, job.deadline, shadow.instance_group,
                    **job.options, **options,
                )  # fmt: skip
            finally:
                if gate is not None:
                    gate.leave()
            if not self._yield(budget):  # its answer is dropped: live requests kept this process busy
                self._skipped(shadow, BUSY)
                return
            jobs.respond(shadow, request, job, run, self.statistics, None)  # the shadow version's statistics
        except QueueFull:  # the worker kept running other requests: not run
            self._skipped(shadow, BUSY)
            return
        except InferenceError as exc:
            self.statistics.record_failure(model, number, _now() - started, failure_reason(exc, False))
            self.rollups.failed(time.time(), model, number)
            SHADOW_REQUESTS.labels(model, shadow.version, "error").inc()
            logger.debug("shadow copy on %s version %s failed: %s", model, number, exc)
            return
        self._yield(budget)  # counted in the statistics already: compared whatever the wait
        counts: dict[str, OutputComparison] = {}
        compare(dict(zip(names, outputs)), dict(zip(job.names, run.outputs)), counts)
        self.rollups.compared(time.time(), model, number, counts)
        SHADOW_REQUESTS.labels(model, shadow.version, "compared").inc()

    def _yield(self, budget: list, first: float = YIELD_SECONDS) -> bool:
        """Sleep ``first`` seconds (the GIL released: a live request waiting for it takes it); True when no
        live request ran or began in this process meanwhile, else sleep on until a sleep was quiet: a quiet
        spell (``quiet_seconds``), then twice as long each time up to :data:`_QUIET_SPELLS` of them (a busy
        process is looked at less and less often); False once the copy waited ``budget[0]`` seconds in all
        (it is then not run on: counted ``busy``)."""
        live, began = self.live, self.began
        started = time.monotonic()
        quiet = self.settings.quiet_seconds
        pause = first
        try:
            while True:
                mark = began() if began is not None else None
                time.sleep(pause)
                if (live is None or not live()) and (began is None or began() == mark):
                    return True
                left = budget[0] - (time.monotonic() - started)
                if left <= 0:
                    return False
                pause = min(left, quiet if pause < quiet else min(2 * pause, _QUIET_SPELLS * quiet))
        finally:
            budget[0] -= time.monotonic() - started

    def _busy(self, entry: VersionEntry) -> bool:
        """Whether the live version has requests waiting for its seats in this process."""
        if entry.target is None:
            return False
        gate = self.fair.gate(entry.target, entry.instance_group)
        return gate is not None and gate.waiting > 0

    # -- the rollups' store --------------------------------------------------------
    def flush(self, wait: bool = False) -> None:
        """Write the changed minutes to the store (kept for the next flush when it fails); ``wait``: for
        another thread's flush to end first (else that one is enough)."""
        store = self.settings.store
        if store is None or not self._flush_lock.acquire(blocking=wait):
            return
        try:
            cells = self.rollups.pending()
            if cells:
                store.write(f"{self.statistics.machine}-{os.getpid()}", cells)
            self.rollups.written(cells, time.time())
            self._watch.ok()
        except Exception as exc:
            self._watch.failed(exc, f"comparisons are kept and written when it is back (every "
                                    f"{self.settings.flush_seconds:g} s)")  # fmt: skip
        finally:
            self._flushed = time.monotonic()
            self._flush_lock.release()

    def _last_flush(self) -> None:
        """At exit: the open minutes' last counts."""
        self._stop.set()
        self.flush(wait=True)

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait until every queued copy was taken and run (tests, benchmarks); False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self.queue and not self._running:
                    return True
            time.sleep(0.001)
        return False
