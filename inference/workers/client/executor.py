"""Worker mode, front-end side: run inferences on pinned workers over
persistent connections (``INFERENCE_EXECUTOR=workers`` with ``REDIS_URL``).

Workers announce themselves with a Redis heartbeat
(:class:`~inference.workers.placement.WorkerDirectory`); Redis is used for
nothing else on the request path, and a heartbeat is never trusted: a
connection serves only once the worker proved itself
(:mod:`inference.workers.link`: its TLS certificate from the deployment's
CA, or its Unix socket's peer is this user) and said hello. Each front-end
process keeps a bounded pool of connections to each worker
(:mod:`inference.workers.client.pool`: at most
``WORKER_CONNECTIONS_PER_PROCESS``; a request beyond waits for one); a
request takes one (or opens one), sends one frame
(:mod:`inference.workers.frames`: the tensors' bytes as they are), waits for
the answer frame and gives the connection back (connections:
:mod:`inference.workers.client.connections`).

The steps of a request are written once, as a generator (:meth:`_steps`)
that yields what it needs done: read the heartbeats again, connect to a
worker, wait for a pooled connection, wait for the socket.
:meth:`RemoteExecutor.run` does them in the calling thread (blocking sockets
that time out every 0.25 s); :meth:`~RemoteExecutor.run_async` on an event
loop (the socket in the loop's selector; connecting and reading Redis in a
thread).

Faults, each answered once:

- no live worker for the model's devices -> UNAVAILABLE at once (after one
  fresh read of the heartbeats, shared with other such requests: a worker
  that started since the directory's last refresh serves it);
- a worker that does not prove itself is passed over for the next of its
  device, and the 503 names why when none is left (another deployment's
  certificate, a socket of another user, ...);
- the connection closes before any byte of the answer (the worker was
  killed or stopped), or the worker answers that it is draining
  (:class:`~inference.workers.messages.Draining`): the request goes once
  more, to another worker of its devices (inference is idempotent; a
  request of a sequence never goes elsewhere); with none left it answers
  UNAVAILABLE at once. A draining worker is dropped from this process's
  directory at once;
- a worker that hangs without closing answers UNAVAILABLE once its
  heartbeat expires (about 5 s);
- no answer before the request's deadline -> DEADLINE_EXCEEDED (the
  connection is closed, so a late answer is never read as another's);
- a pooled connection found closed before use is replaced; a send that
  fails on a pooled connection, when no other worker serves, is retried
  once on a new one (the worker never received a whole frame); a worker
  that refuses connections (killed, its heartbeat not yet expired) is
  passed over for the next one of the device;
- every worker's pool is at its cap: the request waits for the first
  one's next free connection, until its deadline (DEADLINE_EXCEEDED);
- a request of a sequence (sequence batching) goes only to the worker that
  holds the sequence (:mod:`inference.workers.client.sequence_routes`): when that
  worker is gone, the request answers UNAVAILABLE naming the lost sequence.

Every UNAVAILABLE carries a retry delay (``Retry-After``): a heartbeat's
expiry when no worker serves the devices, else a second.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time

import numpy as np

from inference.observability import tracing
from inference.protocol import errors
from inference.runtime.execution import RunResult, RunTarget
from inference.serving import instance_groups
from inference.serving.instance_groups import describe as describe_group
from inference.workers import frames, link, messages
from inference.workers.client.answers import run_result
from inference.workers.client.connections import (
    WOULD_BLOCK,
    Connection,
    WorkerDraining,
    closed,
    connect,
    ready,
    send_failed,
)
from inference.workers.client.pool import ConnectionPool, Waiter
from inference.workers.client.segments import SegmentRuns
from inference.workers.client.sequence_routes import SequenceRoutes
from inference.workers.placement import HEARTBEAT_TTL_MS, Worker, WorkerDirectory

logger = logging.getLogger(__name__)

#: How long a worker that refused a connection is passed over (its heartbeat expires meanwhile).
_UNREACHABLE_SECONDS = 5.0
_DONE = object()


class _Steps:
    """A request's steps (:meth:`RemoteExecutor._steps`, a generator of what
    it needs done) driven one need at a time: :meth:`next` resumes them
    with how the last need went (:meth:`gave` a value, or :meth:`failed`
    with an error, raised where they wait) and returns the next need, or
    ``_DONE`` with :attr:`result` set."""

    __slots__ = ("_failed", "_steps", "_value", "result")

    def __init__(self, steps):
        self._steps = steps
        self._value, self._failed = None, False
        self.result = None

    def next(self):
        try:
            return self._steps.throw(self._value) if self._failed else self._steps.send(self._value)
        except StopIteration as done:
            self.result = done.value
            return _DONE

    def gave(self, value) -> None:
        self._value, self._failed = value, False

    def failed(self, exc: Exception) -> None:
        self._value, self._failed = exc, True

    def close(self) -> None:
        self._steps.close()


class _SendFailed(Exception):
    """A request frame could not be sent (the worker never got all of it)."""


class _Unanswered(Exception):
    """The connection closed before any byte of the answer (``sent``: after
    the whole request frame went), or the worker answered that it drains:
    ``error`` is what to answer if the request cannot go again."""

    def __init__(self, error: errors.ModelNotReady, sent: bool, draining: bool = False):
        super().__init__(error.message)
        self.error, self.sent, self.draining = error, sent, draining


class RemoteExecutor(SegmentRuns):
    """Runs inferences on workers (see module doc), and consecutive steps of
    an ensemble together on one (:class:`SegmentRuns`); thread-safe."""

    def __init__(
        self,
        directory: WorkerDirectory,
        max_frame: int,
        default_timeout: float = 30.0,
        tls: link.TLSFiles | None = None,
        idle_seconds: float = 150.0,
        connections_per_worker: int = 32,
    ):
        """``idle_seconds``: pooled connections idle longer are closed here
        (half the workers' idle limit, so a worker never closes one this
        front end is about to use); ``connections_per_worker``: the most
        this process holds to one worker (WORKER_CONNECTIONS_PER_PROCESS)."""
        self.directory = directory
        self.max_frame = max_frame
        self.default_timeout = default_timeout
        self.tls = tls
        self.pool = ConnectionPool(connections_per_worker, idle_seconds, self._drained)
        self._unreachable: dict[str, float] = {}  # worker id -> until when it is skipped
        self.routes = SequenceRoutes()  # the worker of each sequence this process sent

    def start(self) -> None:
        self.directory.start()
        self.pool.start()

    def gpus(self) -> tuple[int, ...]:
        """The GPU numbers of the live workers (none: CPU workers only)."""
        numbers = (instance_groups.gpu_number(d) for d in self.directory.live_devices())
        return tuple(sorted(n for n in numbers if n is not None))

    def on_snapshot(self, snapshot) -> None:
        """Sessions live in the workers; they follow the registry themselves."""

    #: The worker records the run's spans (queue wait, batch formation, session.run) itself.
    remote = True

    def seats(self, target: RunTarget, placement=()) -> int:
        """Requests of ``target`` this front-end process sends at once (its
        fair-share gate's seats, :mod:`inference.admission.fair_share`): the version's
        seats on one runner times the live workers of its devices (0: not
        gated)."""
        return target.seats * max(1, len(self.directory.candidates(placement)))

    def blocks(self, target: RunTarget) -> bool:
        """Every call waits on a worker."""
        return True

    # -- running: the drivers ------------------------------------------------
    def run(
        self, target: RunTarget, feeds: dict[str, np.ndarray], output_names: list[str], rows: int = 1,
        deadline: float | None = None, placement=(), sequence=None, regions=None, schedule=None,
        shadow: bool = False,
    ) -> RunResult:  # fmt: skip
        """Run one request on a worker of a device ``placement`` (the model's
        instance group) allows, in this thread (``sequence``: its place in a
        sequence, for a model with sequence batching; ``regions``: a
        :class:`~inference.shared_memory.regions.RegionPlan` of its tensors in
        shared-memory regions, which a worker on this machine reads and
        writes itself; ``schedule``: its priority and timeout, for the
        worker's dynamic batcher; ``shadow``: a shadow copy, which the worker
        runs only while it runs no other request, else answers QueueFull:
        :mod:`inference.shadow.traffic`). Raises ModelNotReady, DeadlineExceeded
        and the errors the worker reports (see module doc)."""
        return self._drive(
            self._steps(
                target, feeds, output_names, rows, deadline, placement, True, sequence, regions, schedule, shadow
            )
        )

    def _drive(self, generator):
        """Run a request's steps (a generator of needs, see :meth:`_do`) in this thread; what it returns."""
        steps = _Steps(generator)
        while (need := steps.next()) is not _DONE:
            try:
                steps.gave(self._do(need, blocking=True))
            except Exception as exc:
                steps.failed(exc)
        return steps.result

    async def run_async(
        self, target: RunTarget, feeds: dict[str, np.ndarray], output_names: list[str], rows: int = 1,
        deadline: float | None = None, placement=(), sequence=None, regions=None, schedule=None,
    ) -> RunResult:  # fmt: skip
        """:meth:`run` on an event loop (the gRPC front end): the connection's
        socket waits in the loop's selector, so a request costs no thread
        hand-off. The same faults and errors; a call cancelled while it
        waits closes its connection."""
        steps = _Steps(
            self._steps(target, feeds, output_names, rows, deadline, placement, False, sequence, regions, schedule)
        )
        try:
            while (need := steps.next()) is not _DONE:
                try:
                    steps.gave(await self._do_async(need))
                except Exception as exc:
                    steps.failed(exc)
            return steps.result
        finally:
            steps.close()  # cancelled while waiting: the connection is closed (see _steps)

    def _do(self, need, blocking: bool):
        """Do what a step needs, in this thread: a Worker -> a connection to
        it; None -> read the heartbeats again; a Waiter -> wait a while for
        a pooled connection; (connection, writable, deadline) -> the socket
        waited (its timeout) and nothing came, so check the request's
        deadline and the worker's liveness."""
        if need is None:
            return self.directory.catch_up(time.monotonic())
        if isinstance(need, Worker):
            return connect(need, self.tls, self.max_frame, blocking)
        if isinstance(need, Waiter):
            return need.wait(need.slice())
        conn, _, deadline = need
        return self._check_waiting(conn, deadline)

    async def _do_async(self, need):
        """:meth:`_do` on an event loop: waits in the loop's selector, the
        rest in a thread."""
        if need is None or isinstance(need, Worker):
            return await asyncio.to_thread(self._do, need, False)
        if isinstance(need, Waiter):
            return await need.wait_async(need.slice())
        conn, writable, deadline = need
        if not await ready(asyncio.get_running_loop(), conn.sock, writable):
            self._check_waiting(conn, deadline)

    # -- running: the steps ----------------------------------------------------
    def _steps(
        self, target, feeds, output_names, rows, deadline, placement, blocking: bool, sequence=None, regions=None,
        schedule=None, shadow: bool = False,
    ):  # fmt: skip
        """One request, as a generator of what it needs done (see :meth:`_do`;
        ``blocking``: for a thread, else an event loop); returns its RunResult."""
        workers = self._candidates(target, placement, caught_up=False)
        if not workers:
            yield None
            workers = self._candidates(target, placement, caught_up=sequence is None)
        request, deadline = self._request(target, output_names, rows, deadline, sequence)
        if schedule is not None:
            request.priority, request.timeout_us = schedule.priority, schedule.timeout_us
        request.shadow = shadow
        if sequence is None:
            order = self._order(target.key, workers)
            answer = yield from self._exchange(order, request, feeds, deadline, blocking, regions)
            return run_result(*answer, request.outputs)
        order = self.routes.order(target, sequence, workers)  # the sequence's worker, and no other
        if not order:
            self._candidates(target, placement, caught_up=True)  # raises: no live worker
        try:
            answer = yield from self._exchange(order, request, feeds, deadline, blocking, regions, resend=False)
            result = run_result(*answer, request.outputs)
        except errors.ModelNotReady as exc:
            raise self.routes.failed(target, sequence, order[0], exc) from None
        finally:
            if sequence.end:
                self.routes.forget(target, sequence)
        self.routes.answered(target, sequence, order[0])  # remembered once its worker took it
        return result

    def _exchange(self, order: list[Worker], request, feeds, deadline: float, blocking: bool, regions=None,
                  resend: bool = True):  # fmt: skip
        """Send the request (a RunRequest or SegmentRequest) to the first
        worker of ``order`` with a connection to spare and read its answer
        (steps, see :meth:`_steps`); returns (the answer, the frame's body).
        Unanswered (see :class:`_Unanswered`), it goes once more: to the
        next worker of ``order`` (``resend``: not for a sequence's request),
        else, when the frame never went whole on a pooled connection, on a
        new connection to the same worker."""
        again = True
        while True:
            conn, pooled = yield from self._connection(order, deadline, blocking)
            try:
                answer = yield from self._ask(conn, request, feeds, deadline, regions)
            except _Unanswered as exc:
                self.pool.release(conn.worker)
                if exc.draining:
                    self._drained(conn.worker.id)
                others = [w for w in order if w.id != conn.worker.id]
                if again and resend and others:
                    order = others
                elif not (again and pooled and not exc.sent and not exc.draining):
                    raise exc.error from None
                again = False
                continue
            except BaseException:  # an error, or a cancelled call: what the connection holds is unknown
                conn.close()
                self.pool.release(conn.worker)
                raise
            self.pool.give(conn)
            return answer

    def _ask(self, conn: Connection, request, feeds, deadline: float, regions=None):
        """Send the request on ``conn`` and read the answer (steps); raises
        _Unanswered (closed before any byte of the answer, or Draining)."""
        try:
            yield from self._send(conn, request, feeds, deadline, regions)
        except _SendFailed as exc:
            raise _Unanswered(send_failed(conn, exc.__cause__), sent=False) from None
        answer = yield from self._receive(conn, deadline)
        if isinstance(answer[0], messages.Draining):
            conn.close()
            worker = conn.worker
            raise _Unanswered(WorkerDraining(f"the {worker.queue} worker {worker.id} is draining"), True, True)
        return answer

    def _connection(self, order: list[Worker], deadline: float, blocking: bool):
        """A connection (for a thread, or an event loop) to the first worker
        of ``order`` (see :meth:`_order`) that has one to spare: pooled, or
        new while its pool is under its cap; when every worker's pool is
        at its cap, the first one's next free connection (steps); and
        whether it was pooled."""
        failure = None
        order = list(order)
        while order:
            worker = grant = None
            for worker in order:
                if (grant := self.pool.take(worker)) is not None:
                    break
            if grant is None:
                worker = order[0]
                grant = yield from self._wait(worker, deadline)
                if grant is None:  # it stopped taking requests meanwhile
                    order.remove(worker)
                    failure = failure or self._not_accepting(worker)
                    continue
            if isinstance(grant, Connection):
                grant.use(blocking)
                return grant, True
            try:
                conn = yield worker
            except errors.ModelNotReady as exc:
                self.pool.release(worker)
                if isinstance(exc, WorkerDraining):
                    self._drained(worker.id)
                else:
                    self._unreachable[worker.id] = time.monotonic() + _UNREACHABLE_SECONDS
                order.remove(worker)
                failure = exc
                continue
            except BaseException:  # cancelled while connecting: its place is free again
                self.pool.release(worker)
                raise
            return conn, False
        raise failure or errors.ModelNotReady("no worker to send the request to")

    def _wait(self, worker: Worker, deadline: float):
        """Wait (steps) for a connection to ``worker`` to come free in this
        process's pool: the connection, or ``worker`` (open one); None once
        the worker takes no new request. Raises DeadlineExceeded."""
        waiter = self.pool.wait(worker, deadline)
        try:
            while True:
                yield waiter
                if waiter.grant is not None:
                    grant, waiter = waiter.grant, None
                    return grant
                if time.monotonic() >= deadline:
                    raise errors.DeadlineExceeded(
                        f"no connection to the {worker.queue} worker {worker.id} came free before the request's "
                        f"deadline (this process holds {self.pool.cap}, WORKER_CONNECTIONS_PER_PROCESS)"
                    )
                if not self.directory.accepts(worker.id):
                    return None
        finally:
            if waiter is not None:
                self.pool.cancel(waiter)  # what it was granted meanwhile goes to the next

    @staticmethod
    def _not_accepting(worker: Worker) -> errors.ModelNotReady:
        return errors.ModelNotReady(f"the {worker.queue} worker {worker.id} stopped taking requests (draining)")

    def _drained(self, worker_id: str) -> None:
        """The worker said it is draining: no request of this process goes to it any more."""
        self.directory.drop(worker_id)
        self.pool.forget(worker_id)

    @staticmethod
    def _send(conn: Connection, request: messages.RunRequest, feeds, deadline: float, regions=None):
        pending = conn.encode(request, feeds, regions)
        while pending:
            try:
                frames.send_views(conn.sock, pending)
            except WOULD_BLOCK as exc:
                yield conn, not isinstance(exc, ssl.SSLWantReadError), deadline
            except OSError as exc:
                raise _SendFailed() from exc

    @staticmethod
    def _receive(conn: Connection, deadline: float):
        while True:
            try:
                return conn.reader.frame()
            except WOULD_BLOCK as exc:
                yield conn, isinstance(exc, ssl.SSLWantWriteError), deadline
            except frames.BadHeader as exc:
                conn.close()
                raise errors.ModelNotReady(f"the {conn.worker.queue} worker {conn.worker.id} {exc.message}") from None
            except (OSError, frames.FrameError):
                if conn.reader.partial:
                    raise closed(conn) from None
                raise _Unanswered(closed(conn), sent=True) from None

    def _order(self, key, workers: list[Worker]) -> list[Worker]:
        """The workers to try, the next in round robin (per ``key``) first;
        workers that refused connections lately (dead, heartbeat not yet
        expired, or not ours) are left out while others remain: nothing was
        sent to them."""
        first = self.directory.pick(key, workers)
        start = workers.index(first)
        now = time.monotonic()
        order = workers[start:] + workers[:start]
        return [w for w in order if self._unreachable.get(w.id, 0.0) <= now] or order

    def _candidates(self, target: RunTarget, placement, caught_up: bool) -> list[Worker]:
        """Live workers of the devices the instance group allows; empty
        before the directory caught up (:meth:`WorkerDirectory.catch_up`),
        ModelNotReady after."""
        workers = self.directory.candidates(placement)
        if not workers and caught_up:
            why = self.directory.error or f"no live worker serves {describe_group(placement)}"
            raise errors.ModelNotReady(f"model '{target.model}' cannot run now: {why}", HEARTBEAT_TTL_MS / 1000)
        return workers

    def _request(self, target: RunTarget, output_names, rows, deadline, sequence) -> tuple[messages.RunRequest, float]:
        """The request frame's header and its deadline (``time.monotonic()``)."""
        if deadline is None:
            deadline = time.monotonic() + self.default_timeout
        request = messages.RunRequest(
            target.model, target.version, target.sha256, list(output_names), rows,
            time.time() + (deadline - time.monotonic()),
        )  # fmt: skip
        if sequence is not None:
            request.sequence = messages.Sequence(sequence.corrid, sequence.start, sequence.end, sequence.owner)
        if tracing.ENABLED:
            request.traceparent = tracing.traceparent()  # only for a traced request: the worker's spans join it
        return request, deadline

    def _check_waiting(self, conn: Connection, deadline: float) -> None:
        """While waiting on a worker: DeadlineExceeded past the deadline,
        ModelNotReady once its heartbeat expired (the connection is closed)."""
        worker = conn.worker
        if time.monotonic() >= deadline:
            conn.close()
            raise errors.DeadlineExceeded(
                f"no answer from the {worker.queue} worker {worker.id} before the request's deadline"
            )
        if not self.directory.is_live(worker.id):
            conn.close()
            raise errors.ModelNotReady(
                f"the {worker.queue} worker {worker.id} stopped before answering (its heartbeat expired)"
            )
