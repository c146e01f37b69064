"""Worker mode, front-end side: run inferences on pinned workers over
persistent connections (``INFERENCE_EXECUTOR=workers`` with ``REDIS_URL``).

Workers announce themselves with a Redis heartbeat
(:class:`~inference.runtime.placement.WorkerDirectory`); Redis is used for
nothing else on the request path, and a heartbeat is never trusted: a
connection serves only once the worker proved itself
(:mod:`inference.runtime.link`: its TLS certificate from the deployment's
CA, or its Unix socket's peer is this user) and said hello. Each front-end
process keeps idle connections to each worker; a request takes one (or
opens one), sends one frame (:mod:`inference.runtime.frames`: the tensors'
bytes as they are), waits for the answer frame and puts the connection back.

The steps of a request are written once, as a generator (:meth:`_steps`)
that yields what it needs done: read the heartbeats again, connect to a
worker, wait for the socket. :meth:`RemoteExecutor.run` does them in the
calling thread (blocking sockets that time out every 0.25 s);
:meth:`~RemoteExecutor.run_async` on an event loop (the socket in the loop's
selector; connecting and reading Redis in a thread).

Faults, each answered once and never retried after the request was sent:

- no live worker for the model's devices -> UNAVAILABLE at once (after one
  fresh read of the heartbeats, shared with other such requests: a worker
  that started since the directory's last refresh serves it);
- a worker that does not prove itself is passed over for the next of its
  device, and the 503 names why when none is left (another deployment's
  certificate, a socket of another user, ...);
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
  over for the next one of the device;
- a request of a sequence (sequence batching) goes only to the worker that
  holds the sequence (:mod:`inference.runtime.sequence_routes`): when that
  worker is gone, the request answers UNAVAILABLE naming the lost sequence.
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import socket
import ssl
import struct
import threading
import time

import numpy as np

from inference import instance_groups, tracing
from inference.instance_groups import describe as describe_group
from inference.protocol import errors
from inference.runtime import frames, link, messages
from inference.runtime.execution import RunResult, RunTarget
from inference.runtime.placement import Worker, WorkerDirectory
from inference.runtime.sequence_routes import SequenceRoutes

logger = logging.getLogger(__name__)

#: How often a waiting request checks its deadline and that its worker is still alive.
_LIVENESS_SECONDS = 0.25
_SOCKET_TIMEO = struct.pack("ll", 0, int(_LIVENESS_SECONDS * 1e6))
_HOSTNAME = socket.gethostname()
_CONNECT_SECONDS = 3.0
#: A pooled connection used this recently is not checked for a close before reuse.
_TRUSTED_SECONDS = 0.05
#: How long a worker that refused a connection is passed over (its heartbeat expires meanwhile).
_UNREACHABLE_SECONDS = 5.0
#: What a socket operation raises when it would block (or its timeout passed).
_WOULD_BLOCK = (BlockingIOError, TimeoutError, ssl.SSLWantReadError, ssl.SSLWantWriteError)
_POLL_CLOSED = select.POLLIN | select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)


class _Connection:
    __slots__ = ("local", "reader", "shared", "sock", "tls", "used", "worker")

    def __init__(self, sock: socket.socket, worker: Worker, max_frame: int):
        self.sock = sock
        self.worker = worker
        self.reader = frames.Reader(sock, max_frame, messages.to_front_end)
        self.used = time.monotonic()
        self.tls = isinstance(sock, ssl.SSLSocket)
        self.local = sock.family == socket.AF_UNIX  # the worker is on this machine: memory can be shared
        self.shared: frames.SharedBuffer | None = None

    def encode(self, request: messages.RunRequest, feeds: dict[str, np.ndarray], regions=None) -> list[memoryview]:
        """The request frame's byte views: the tensors in the connection's
        shared memory when the worker is on this machine and they are
        large, else inline. ``regions`` (a RegionPlan): tensors in clients'
        shared-memory regions, which a worker on this machine maps itself
        (they are left out of the frame); elsewhere they travel as usual."""
        request.regions, request.output_regions = [], []
        if regions is not None and self.local:
            request.regions = [
                messages.RegionTensor(name, _dtype(feeds[name]), list(feeds[name].shape), s.key, s.offset, s.nbytes)
                for name, s in regions.inputs.items()
            ]
            request.output_regions = [
                messages.RegionTensor(name, "", [], s.key, s.offset, s.nbytes) for name, s in regions.outputs.items()
            ]
            feeds = {name: array for name, array in feeds.items() if name not in regions.inputs}
        buffers = frames.encode(request, feeds.items(), self._shared if self.local else None)
        return frames.views(buffers, self.tls)

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
        """True when the worker closed it (or sent something unasked) while
        it sat idle. A connection that answered less than
        ``_TRUSTED_SECONDS`` ago is not asked (a syscall saved per request
        under load): a worker that died since fails the request it then
        gets, as it fails those it held."""
        if time.monotonic() - self.used < _TRUSTED_SECONDS:
            return False
        poller = select.poll()
        poller.register(self.sock.fileno(), _POLL_CLOSED)
        return bool(poller.poll(0))

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


_DONE = object()


def _dtype(array: np.ndarray) -> str:
    """A numeric array's little-endian numpy type string (as frames describe tensors)."""
    dtype = array.dtype
    return (dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype).str


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


def _connect_unix(path: str) -> socket.socket:
    """A connection to a worker's Unix socket, its peer checked. A full
    accept backlog (EAGAIN: the worker is busy accepting) is retried until
    the connect timeout rather than taken for a refusal. Raises LinkRefused
    (another user's socket) or OSError."""
    deadline = time.monotonic() + _CONNECT_SECONDS
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(_CONNECT_SECONDS)
            sock.connect(path)
            link.check_local_peer(sock, os.getuid())
            return sock
        except BlockingIOError:
            sock.close()
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.005)
        except BaseException:
            sock.close()
            raise


def _open(worker: Worker, tls: link.TLSFiles | None) -> socket.socket:
    """A socket to the worker whose other end proved it is one of ours: its
    Unix socket when it runs on this machine and the path is visible here
    (its peer must run as this user), else TLS over TCP (its certificate
    must be the deployment's). Raises LinkRefused or OSError."""
    announced = worker.announcement
    path = announced.unix
    local_error = None
    if path and announced.machine == _HOSTNAME and os.path.exists(path):
        try:
            return _connect_unix(path)
        except OSError as exc:
            local_error = exc  # fall back to TCP
    if not announced.address:
        if local_error is not None:
            raise link.LinkRefused(f"its Unix socket refused the connection ({local_error}) and it has no TCP listener")
        raise link.LinkRefused("it has no TCP listener and its Unix socket is not on this machine")
    if tls is None:
        raise link.LinkRefused(
            "it is on another machine and this front end has no worker TLS certificate (WORKER_TLS_CA/CERT/KEY)"
        )
    raw = socket.create_connection(worker.address, timeout=_CONNECT_SECONDS)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        return tls.client_context.wrap_socket(raw, server_hostname=tls.server_name)
    except ssl.SSLError as exc:
        raw.close()
        raise link.LinkRefused(link.refusal_reason(exc)) from None


class RemoteExecutor:
    """Runs inferences on workers (see module doc); thread-safe."""

    def __init__(
        self,
        directory: WorkerDirectory,
        max_frame: int,
        default_timeout: float = 30.0,
        tls: link.TLSFiles | None = None,
        idle_seconds: float = 150.0,
    ):
        """``idle_seconds``: pooled connections idle longer are closed here
        (half the workers' idle limit, so a worker never closes one this
        front end is about to use)."""
        self.directory = directory
        self.max_frame = max_frame
        self.default_timeout = default_timeout
        self.tls = tls
        self.idle_seconds = idle_seconds
        self._idle: dict[str, list[_Connection]] = {}  # blocking sockets (threads)
        self._idle_async: dict[str, list[_Connection]] = {}  # non-blocking sockets (event loops)
        self._unreachable: dict[str, float] = {}  # worker id -> until when it is skipped
        self._lock = threading.Lock()
        self.routes = SequenceRoutes()  # the worker of each sequence this process sent

    def start(self) -> None:
        self.directory.start()

    def gpus(self) -> tuple[int, ...]:
        """The GPU numbers of the live workers (none: CPU workers only)."""
        numbers = (instance_groups.gpu_number(d) for d in self.directory.live_devices())
        return tuple(sorted(n for n in numbers if n is not None))

    def on_snapshot(self, snapshot) -> None:
        """Sessions live in the workers; they follow the registry themselves."""

    #: The worker records the run's spans (queue wait, batch formation, session.run) itself.
    remote = True

    def blocks(self, target: RunTarget) -> bool:
        """Every call waits on a worker."""
        return True

    # -- running: the drivers ------------------------------------------------
    def run(
        self, target: RunTarget, feeds: dict[str, np.ndarray], output_names: list[str], rows: int = 1,
        deadline: float | None = None, placement=(), sequence=None, regions=None,
    ) -> RunResult:  # fmt: skip
        """Run one request on a worker of a device ``placement`` (the model's
        instance group) allows, in this thread (``sequence``: its place in a
        sequence, for a model with sequence batching; ``regions``: a
        :class:`~inference.shared_memory.RegionPlan` of its tensors in
        shared-memory regions, which a worker on this machine reads and
        writes itself). Raises ModelNotReady, DeadlineExceeded and the errors
        the worker reports (see module doc)."""
        steps = _Steps(
            self._steps(target, feeds, output_names, rows, deadline, placement, self._idle, sequence, regions)
        )
        while (need := steps.next()) is not _DONE:
            try:
                steps.gave(self._do(need, blocking=True))
            except Exception as exc:
                steps.failed(exc)
        return steps.result

    async def run_async(
        self, target: RunTarget, feeds: dict[str, np.ndarray], output_names: list[str], rows: int = 1,
        deadline: float | None = None, placement=(), sequence=None, regions=None,
    ) -> RunResult:  # fmt: skip
        """:meth:`run` on an event loop (the gRPC front end): the connection's
        socket waits in the loop's selector, so a request costs no thread
        hand-off. The same faults and errors; a call cancelled while it
        waits closes its connection."""
        steps = _Steps(
            self._steps(target, feeds, output_names, rows, deadline, placement, self._idle_async, sequence, regions)
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
        it; None -> read the heartbeats again; (connection, writable,
        deadline) -> the socket waited (its timeout) and nothing came, so
        check the request's deadline and the worker's liveness."""
        if need is None:
            return self.directory.catch_up(time.monotonic())
        if isinstance(need, Worker):
            return self._connect(need, blocking)
        conn, _, deadline = need
        return self._check_waiting(conn, deadline)

    async def _do_async(self, need):
        """:meth:`_do` on an event loop: waits in the loop's selector, the
        rest in a thread."""
        if need is None or isinstance(need, Worker):
            return await asyncio.to_thread(self._do, need, False)
        conn, writable, deadline = need
        if not await _ready(asyncio.get_running_loop(), conn.sock, writable):
            self._check_waiting(conn, deadline)

    # -- running: the steps ----------------------------------------------------
    def _steps(self, target, feeds, output_names, rows, deadline, placement, idle: dict, sequence=None, regions=None):
        """One request, as a generator of what it needs done (see :meth:`_do`);
        returns its RunResult."""
        workers = self._candidates(target, placement, caught_up=False)
        if not workers:
            yield None
            workers = self._candidates(target, placement, caught_up=sequence is None)
        request, deadline = self._request(target, output_names, rows, deadline, sequence)
        if sequence is None:
            return (yield from self._exchange(self._order(target, workers), request, feeds, deadline, idle, regions))
        order = self.routes.order(target, sequence, workers)  # the sequence's worker, and no other
        if not order:
            self._candidates(target, placement, caught_up=True)  # raises: no live worker
        try:
            return (yield from self._exchange(order, request, feeds, deadline, idle, regions))
        except errors.ModelNotReady as exc:
            raise self.routes.failed(target, sequence, order[0], exc) from None
        finally:
            if sequence.end:
                self.routes.forget(target, sequence)

    def _exchange(
        self, order: list[Worker], request: messages.RunRequest, feeds, deadline: float, idle: dict, regions=None
    ):
        """Send the request to the first reachable worker of ``order`` and
        read its answer (steps, see :meth:`_steps`); returns its RunResult."""
        output_names = request.outputs
        conn, reused = yield from self._connection(order, idle)
        try:
            try:
                yield from self._send(conn, request, feeds, deadline, regions)
            except _SendFailed:
                conn.close()
                if not reused:
                    raise _send_failed(conn, None) from None
                conn = yield conn.worker  # the pooled connection had died: once more, on a new one
                try:
                    yield from self._send(conn, request, feeds, deadline, regions)
                except _SendFailed as again:
                    raise _send_failed(conn, again.__cause__) from None
            answer, body = yield from self._receive(conn, deadline)
        except BaseException:  # an error, or a cancelled call: what the connection holds is unknown
            conn.close()
            raise
        self._checkin(conn, idle)
        return _result(answer, body, output_names)

    def _connection(self, order: list[Worker], idle: dict):
        """A connection to the first reachable worker of ``order`` (see
        :meth:`_order`) and whether it was pooled."""
        failure = None
        for worker in order:
            conn = self._pooled(worker, idle)
            if conn is not None:
                return conn, True
            try:
                return (yield worker), False
            except errors.ModelNotReady as exc:
                self._unreachable[worker.id] = time.monotonic() + _UNREACHABLE_SECONDS
                failure = exc
        raise failure

    @staticmethod
    def _send(conn: _Connection, request: messages.RunRequest, feeds, deadline: float, regions=None):
        pending = conn.encode(request, feeds, regions)
        while pending:
            try:
                frames.send_views(conn.sock, pending)
            except _WOULD_BLOCK as exc:
                yield conn, not isinstance(exc, ssl.SSLWantReadError), deadline
            except OSError as exc:
                raise _SendFailed() from exc

    @staticmethod
    def _receive(conn: _Connection, deadline: float):
        while True:
            try:
                return conn.reader.frame()
            except _WOULD_BLOCK as exc:
                yield conn, isinstance(exc, ssl.SSLWantWriteError), deadline
            except frames.BadHeader as exc:
                conn.close()
                raise errors.ModelNotReady(f"the {conn.worker.queue} worker {conn.worker.id} {exc.message}") from None
            except (OSError, frames.FrameError):
                raise _closed(conn) from None

    # -- connections -----------------------------------------------------------
    def _connect(self, worker: Worker, blocking: bool) -> _Connection:
        """A new connection to ``worker``, authenticated (it said hello), for
        a thread (``blocking``: reads give up every 0.25 s, so a waiting
        request checks its deadline and its worker) or an event loop.
        Raises ModelNotReady with the reason."""
        try:
            sock = _open(worker, self.tls)
            conn = _Connection(sock, worker, self.max_frame)
            hello, _ = conn.reader.frame()
            if not isinstance(hello, messages.Hello):
                raise link.LinkRefused(f"it answered {type(hello).__name__} to a new connection")
            if hello.worker != worker.id:
                raise link.LinkRefused(f"it says it is the worker {hello.worker}")
            if not blocking:
                sock.setblocking(False)
            elif conn.tls:
                sock.settimeout(_LIVENESS_SECONDS)
            else:
                sock.settimeout(None)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _SOCKET_TIMEO)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _SOCKET_TIMEO)
        except (OSError, frames.FrameError, frames.BadHeader) as exc:
            if isinstance(exc, ssl.SSLError):
                exc = link.LinkRefused(link.refusal_reason(exc))
            elif isinstance(exc, frames.FrameError):
                exc = link.LinkRefused(
                    "it closed the connection before saying hello (this front end's certificate is not "
                    "its deployment's, or it is at its connection limit: see its log)"
                )
            if isinstance(exc, link.LinkRefused):
                logger.warning("not using the %s worker %s at %s: %s", worker.queue, worker.id, worker.address, exc)
            raise errors.ModelNotReady(f"cannot connect to the {worker.queue} worker {worker.id}: {exc}") from None
        return conn

    def _pooled(self, worker: Worker, idle: dict) -> _Connection | None:
        """An idle connection of ``idle`` to ``worker`` that is still open and
        not idle for too long, if any."""
        while True:
            with self._lock:
                pool = idle.get(worker.id)
                conn = pool.pop() if pool else None
            if conn is None:
                return None
            if time.monotonic() - conn.used < self.idle_seconds and not conn.closed_by_peer():
                return conn
            conn.close()

    def _order(self, target: RunTarget, workers: list[Worker]) -> list[Worker]:
        """The workers to try, the next in round robin first; workers that
        refused connections lately (dead, heartbeat not yet expired, or not
        ours) are left out while others remain: nothing was sent to them."""
        first = self.directory.pick(target.key, workers)
        start = workers.index(first)
        now = time.monotonic()
        order = workers[start:] + workers[:start]
        return [w for w in order if self._unreachable.get(w.id, 0.0) <= now] or order

    def _checkin(self, conn: _Connection, idle: dict) -> None:
        conn.used = time.monotonic()
        with self._lock:
            idle.setdefault(conn.worker.id, []).append(conn)

    def _candidates(self, target: RunTarget, placement, caught_up: bool) -> list[Worker]:
        """Live workers of the devices the instance group allows; empty
        before the directory caught up (:meth:`WorkerDirectory.catch_up`),
        ModelNotReady after."""
        workers = self.directory.candidates(placement)
        if not workers and caught_up:
            why = self.directory.error or f"no live worker serves {describe_group(placement)}"
            raise errors.ModelNotReady(f"model '{target.model}' cannot run now: {why}")
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


def _result(answer, body: memoryview, output_names: list[str]) -> RunResult:
    """The run's result from a worker's answer frame (raises the error it reports)."""
    if isinstance(answer, messages.ErrorAnswer):
        raise errors.from_code(answer.code, answer.message)
    if not isinstance(answer, messages.RunAnswer):
        raise errors.ModelNotReady(f"a worker answered a request with {type(answer).__name__}")
    outputs = frames.tensors(answer, body, "worker answer")
    written = None
    if answer.written:  # outputs the worker wrote into the request's shared-memory regions
        written = {entry.name: (tuple(entry.shape), entry.nbytes) for entry in answer.written}
        outputs.update(dict.fromkeys(written))
    try:
        return RunResult(
            [outputs[name] for name in output_names], answer.batch, answer.executed, answer.queue_ns,
            answer.infer_ns, written=written,
        )  # fmt: skip
    except KeyError as exc:
        raise errors.ModelNotReady(f"a worker's answer lacks the output {exc}") from None


def _send_failed(conn: _Connection, exc: BaseException | None) -> errors.ModelNotReady:
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
