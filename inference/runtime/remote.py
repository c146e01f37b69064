"""Worker mode, front-end side: run inferences on pinned workers over
persistent connections (``INFERENCE_EXECUTOR=workers`` with ``REDIS_URL``).

Workers announce their address with a Redis heartbeat
(:class:`~inference.runtime.placement.WorkerDirectory`); Redis is used for
nothing else on the request path. Each front-end process keeps idle
connections to each worker; a request takes one (or opens one: TCP, the
key challenge of :mod:`inference.runtime.worker_server`), sends one frame
(:mod:`inference.runtime.frames`: the tensors' bytes as they are), waits for
the answer frame and puts the connection back.

Faults, each answered once and never retried after the request was sent:

- no live worker for the model's devices -> UNAVAILABLE at once (after one
  fresh read of the heartbeats, shared with other such requests: a worker
  that started since the directory's last refresh serves it);
- the worker dies holding the request: its connection closes, so exactly
  the requests it held answer UNAVAILABLE at once (other workers of the
  same device keep serving); a worker that hangs without closing answers
  UNAVAILABLE once its heartbeat expires (about 5 s);
- no answer before the request's deadline -> DEADLINE_EXCEEDED (the
  connection is closed, so a late answer is never read as another's);
- a pooled connection found closed before use (a restarted worker) is
  replaced; a send that fails on a reused connection is retried once on a
  fresh one (the worker never received a whole frame); a worker that
  refuses connections (killed, its heartbeat not yet expired) is passed
  over for the next one of the device.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
import threading
import time

import numpy as np

from inference import tracing
from inference.protocol import errors
from inference.runtime import frames
from inference.runtime.execution import RunResult, RunTarget
from inference.runtime.placement import Worker, WorkerDirectory, describe_group
from inference.runtime.worker_server import proof

logger = logging.getLogger(__name__)

#: How often a waiting request checks its deadline and that its worker is still alive.
_LIVENESS_SECONDS = 0.25
_RCVTIMEO = struct.pack("ll", 0, int(_LIVENESS_SECONDS * 1e6))
_HOSTNAME = socket.gethostname()
_CONNECT_SECONDS = 3.0
#: A pooled connection used this recently is not checked for a close before reuse.
_TRUSTED_SECONDS = 0.05
#: How long a worker that refused a connection is passed over (its heartbeat expires meanwhile).
_UNREACHABLE_SECONDS = 5.0


class _Connection:
    __slots__ = ("local", "reader", "shared", "sock", "used", "worker")

    def __init__(self, sock: socket.socket, worker: Worker, max_frame: int):
        self.sock = sock
        self.worker = worker
        self.reader = frames.Reader(sock, max_frame)
        self.used = time.monotonic()
        self.local = sock.family == socket.AF_UNIX  # the worker is on this machine: memory can be shared
        self.shared: frames.SharedBuffer | None = None

    def encode(self, header: dict, feeds: dict[str, np.ndarray]) -> list:
        """The request frame: the tensors in the connection's shared memory
        when the worker is on this machine and they are large, else inline."""
        return frames.encode(header, feeds.items(), self._shared if self.local else None)

    def _shared(self, nbytes: int) -> frames.SharedBuffer | None:
        """Shared memory of at least ``nbytes`` (a new, larger one is
        announced to the worker first); None where memfd is unavailable."""
        if self.shared is None or not self.shared.fits(nbytes):
            cap = max(nbytes, min(frames.SHARED_MAX, self.reader.limit))
            size = max(nbytes, 2 * self.shared.size if self.shared else 0)
            size = min(size + -size % (1 << 20), cap)  # whole MiB, doubling, at most the cap
            try:
                buffer, fd = frames.SharedBuffer.create(size)
            except (AttributeError, OSError):
                self.local = False  # no memfd here: the socket carries the tensors
                return None
            try:
                frames.send_shared(self.sock, fd, size)
            finally:
                os.close(fd)
            self.shared = buffer
        return self.shared

    def closed_by_peer(self) -> bool:
        """True when the worker closed it (or it is broken) while it sat idle.
        A connection that answered less than ``_TRUSTED_SECONDS`` ago is not
        asked (a syscall saved per request under load): a worker that died
        since fails the request it then gets, as it fails those it held."""
        if time.monotonic() - self.used < _TRUSTED_SECONDS:
            return False
        try:
            return self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _open(worker: Worker) -> socket.socket:
    """A socket to the worker: its Unix socket when it runs on this host and
    the path is visible here (less kernel work per request than loopback
    TCP), else TCP."""
    path = worker.info.get("unix")
    if path and worker.info.get("machine") == _HOSTNAME and os.path.exists(path):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(_CONNECT_SECONDS)
            sock.connect(path)
            return sock
        except OSError:
            sock.close()  # fall back to TCP
    sock = socket.create_connection(worker.address, timeout=_CONNECT_SECONDS)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class RemoteExecutor:
    """Runs inferences on workers (see module doc); thread-safe."""

    def __init__(self, directory: WorkerDirectory, key: bytes, max_frame: int, default_timeout: float = 30.0):
        self.directory = directory
        self.key = key
        self.max_frame = max_frame
        self.default_timeout = default_timeout
        self._idle: dict[str, list[_Connection]] = {}  # blocking sockets (threads)
        self._idle_async: dict[str, list[_Connection]] = {}  # non-blocking sockets (event loops)
        self._unreachable: dict[str, float] = {}  # worker id -> until when it is skipped
        self._lock = threading.Lock()

    def start(self) -> None:
        self.directory.start()

    def on_snapshot(self, snapshot) -> None:
        """Sessions live in the workers; they follow the registry themselves."""

    #: The worker records the run's spans (queue wait, batch formation, session.run) itself.
    remote = True

    def blocks(self, target: RunTarget) -> bool:
        """Every call waits on a worker."""
        return True

    # -- connections -----------------------------------------------------
    def _connect(self, worker: Worker) -> _Connection:
        try:
            sock = _open(worker)
            conn = _Connection(sock, worker, self.max_frame)
            header, _ = conn.reader.frame()
            frames.send(sock, frames.encode({"proof": proof(self.key, header.get("challenge", b""))}))
            sock.settimeout(None)
            # A blocking socket whose reads give up after a while (BlockingIOError), so
            # that a waiting request checks its deadline and its worker's heartbeat.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _RCVTIMEO)
        except (OSError, frames.FrameError) as exc:
            raise errors.ModelNotReady(f"cannot connect to the {worker.queue} worker {worker.id}: {exc}") from None
        return conn

    def _pooled(self, worker: Worker, idle: dict) -> _Connection | None:
        """An idle connection of ``idle`` to ``worker`` that is still open, if any."""
        while True:
            with self._lock:
                pool = idle.get(worker.id)
                conn = pool.pop() if pool else None
            if conn is None or (conn.worker.address == worker.address and not conn.closed_by_peer()):
                return conn
            conn.close()

    def _checkout(self, worker: Worker) -> tuple[_Connection, bool]:
        """A connection to ``worker`` and whether it was reused."""
        conn = self._pooled(worker, self._idle)
        return (conn, True) if conn is not None else (self._connect(worker), False)

    async def _checkout_async(self, worker: Worker) -> tuple[_Connection, bool]:
        """:meth:`_checkout` for the event loop: a non-blocking connection (a
        new one is opened and authenticated in a thread)."""
        conn = self._pooled(worker, self._idle_async)
        if conn is not None:
            return conn, True
        conn = await asyncio.to_thread(self._connect, worker)
        conn.sock.setblocking(False)
        return conn, False

    def _order(self, target: RunTarget, workers: list[Worker]) -> list[Worker]:
        """The workers to try, the next in round robin first; workers that
        refused connections lately (dead, heartbeat not yet expired) are
        left out while others remain: nothing was sent to them yet."""
        first = self.directory.pick(target.key, workers)
        start = workers.index(first)
        now = time.monotonic()
        order = workers[start:] + workers[:start]
        return [w for w in order if self._unreachable.get(w.id, 0.0) <= now] or order

    def _refused(self, worker: Worker) -> None:
        self._unreachable[worker.id] = time.monotonic() + _UNREACHABLE_SECONDS

    def _connection(self, target: RunTarget, workers: list[Worker]) -> tuple[_Connection, bool]:
        """A connection to the first reachable worker of :meth:`_order`."""
        failure = None
        for worker in self._order(target, workers):
            try:
                return self._checkout(worker)
            except errors.ModelNotReady as exc:
                self._refused(worker)
                failure = exc
        raise failure

    async def _connection_async(self, target: RunTarget, workers: list[Worker]) -> tuple[_Connection, bool]:
        """:meth:`_connection` on the event loop."""
        failure = None
        for worker in self._order(target, workers):
            try:
                return await self._checkout_async(worker)
            except errors.ModelNotReady as exc:
                self._refused(worker)
                failure = exc
        raise failure

    def _checkin(self, conn: _Connection, idle: dict) -> None:
        conn.used = time.monotonic()
        with self._lock:
            idle.setdefault(conn.worker.id, []).append(conn)

    # -- running ---------------------------------------------------------
    def _candidates(self, target: RunTarget, placement, caught_up: bool) -> list[Worker]:
        """Live workers of the devices the instance group allows; empty
        before the directory caught up (:meth:`WorkerDirectory.catch_up`),
        ModelNotReady after."""
        workers = self.directory.candidates(placement)
        if not workers and caught_up:
            why = self.directory.error or f"no live worker serves {describe_group(placement)}"
            raise errors.ModelNotReady(f"model '{target.model}' cannot run now: {why}")
        return workers

    def _header(self, target: RunTarget, output_names, rows, deadline) -> tuple[dict, float]:
        """The request frame's header and its deadline (``time.monotonic()``)."""
        if deadline is None:
            deadline = time.monotonic() + self.default_timeout
        header = {
            "model": target.model,
            "version": target.version,
            "sha256": target.sha256,
            "outputs": output_names,
            "rows": rows,
            "deadline": time.time() + (deadline - time.monotonic()),
        }
        if tracing.ENABLED:
            parent = tracing.traceparent()  # only for a traced request: the worker's spans join its trace
            if parent:
                header["traceparent"] = parent
        return header, deadline

    def run(
        self, target: RunTarget, feeds: dict[str, np.ndarray], output_names: list[str], rows: int = 1,
        deadline: float | None = None, placement=(),
    ) -> RunResult:  # fmt: skip
        """Run one request on a worker of a device ``placement`` (the model's
        instance group) allows. Raises ModelNotReady, DeadlineExceeded and
        the errors the worker reports (see module doc)."""
        workers = self._candidates(target, placement, caught_up=False)
        if not workers:
            self.directory.catch_up(time.monotonic())
            workers = self._candidates(target, placement, caught_up=True)
        header, deadline = self._header(target, output_names, rows, deadline)
        conn, reused = self._connection(target, workers)
        try:
            frames.send(conn.sock, conn.encode(header, feeds))
        except OSError:
            conn = self._resend_on_new(conn, reused)
            try:
                frames.send(conn.sock, conn.encode(header, feeds))
            except OSError as exc:
                raise _send_failed(conn, exc) from None
        answer, body = self._wait(conn, deadline)
        self._checkin(conn, self._idle)
        return _result(answer, body, output_names)

    async def run_async(
        self, target: RunTarget, feeds: dict[str, np.ndarray], output_names: list[str], rows: int = 1,
        deadline: float | None = None, placement=(),
    ) -> RunResult:  # fmt: skip
        """:meth:`run` on an event loop (the gRPC front end): the connection's
        socket waits in the loop's selector, so a request costs no thread
        hand-off. The same faults and errors as :meth:`run`; a call
        cancelled while it waits closes its connection."""
        workers = self._candidates(target, placement, caught_up=False)
        if not workers:
            await asyncio.to_thread(self.directory.catch_up, time.monotonic())
            workers = self._candidates(target, placement, caught_up=True)
        header, deadline = self._header(target, output_names, rows, deadline)
        conn, reused = await self._connection_async(target, workers)
        try:
            try:
                await self._send_async(conn, frames.views(conn.encode(header, feeds)), deadline)
            except OSError:
                conn.close()
                if not reused:
                    raise _send_failed(conn, None) from None
                conn, _ = await self._checkout_async(conn.worker)  # the pooled connection had died: once more
                try:
                    await self._send_async(conn, frames.views(conn.encode(header, feeds)), deadline)
                except OSError as exc:
                    raise _send_failed(conn, exc) from None
            answer, body = await self._wait_async(conn, deadline)
        except BaseException:  # an error or a cancelled call: what the connection holds is unknown
            conn.close()
            raise
        self._checkin(conn, self._idle_async)
        return _result(answer, body, output_names)

    def _resend_on_new(self, conn: _Connection, reused: bool) -> _Connection:
        """After a failed send: a new connection to the same worker when the
        failed one was pooled (it had died idle), else ModelNotReady."""
        conn.close()
        if not reused:
            raise _send_failed(conn, None)
        return self._checkout(conn.worker)[0]

    def _check_waiting(self, conn: _Connection, deadline: float) -> None:
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

    def _wait(self, conn: _Connection, deadline: float) -> tuple[dict, memoryview]:
        while True:
            try:
                return conn.reader.frame()
            except BlockingIOError:  # nothing for _LIVENESS_SECONDS (SO_RCVTIMEO)
                self._check_waiting(conn, deadline)
            except (OSError, frames.FrameError):
                raise _closed(conn) from None

    async def _wait_async(self, conn: _Connection, deadline: float) -> tuple[dict, memoryview]:
        loop = asyncio.get_running_loop()
        while True:
            try:
                return conn.reader.frame()
            except BlockingIOError:
                if not await _ready(loop, conn.sock, writable=False):
                    self._check_waiting(conn, deadline)
            except (OSError, frames.FrameError):
                raise _closed(conn) from None

    async def _send_async(self, conn: _Connection, views: list[memoryview], deadline: float) -> None:
        """Send on a non-blocking socket, waiting in the selector while the
        worker's receive buffer is full. Raises OSError as a send does."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                return frames.send_views(conn.sock, views)
            except BlockingIOError:
                if not await _ready(loop, conn.sock, writable=True):
                    self._check_waiting(conn, deadline)


async def _ready(loop: asyncio.AbstractEventLoop, sock: socket.socket, writable: bool) -> bool:
    """Whether ``sock`` became readable (or writable) within
    ``_LIVENESS_SECONDS``, waiting in the event loop's selector."""
    ready = loop.create_future()

    def wake(value: bool) -> None:
        if not ready.done():
            ready.set_result(value)

    fd = sock.fileno()
    add, remove = (loop.add_writer, loop.remove_writer) if writable else (loop.add_reader, loop.remove_reader)
    add(fd, wake, True)
    timer = loop.call_later(_LIVENESS_SECONDS, wake, False)
    try:
        return await ready
    finally:
        remove(fd)
        timer.cancel()


def _result(answer: dict, body: memoryview, output_names: list[str]) -> RunResult:
    """The run's result from a worker's answer frame (raises the error it reports)."""
    error = answer.get("error")
    if error is not None:
        raise errors.from_code(error[0], error[1])
    outputs = frames.tensors(answer, body, "worker answer")
    return RunResult(
        [outputs[name] for name in output_names],
        answer["batch"], answer["executed"], answer["queue_ns"], answer["infer_ns"],
    )  # fmt: skip


def _send_failed(conn: _Connection, exc: OSError | None) -> errors.ModelNotReady:
    conn.close()
    worker = conn.worker
    if exc is None:
        return errors.ModelNotReady(f"the {worker.queue} worker {worker.id} refused the request")
    return errors.ModelNotReady(f"cannot send to the {worker.queue} worker {worker.id}: {exc}")


def _closed(conn: _Connection) -> errors.ModelNotReady:
    conn.close()
    worker = conn.worker
    return errors.ModelNotReady(
        f"the {worker.queue} worker {worker.id} stopped before answering (its connection closed)"
    )
