"""Worker mode, front-end side: connections to workers
(:mod:`inference.workers.client.executor` runs requests over them).

A connection serves only once the worker proved itself
(:mod:`inference.workers.link`: its TLS certificate from the deployment's
CA, or its Unix socket's peer is this user) and said hello
(:class:`~inference.workers.messages.Hello`). Used by a thread, a
connection has blocking reads that give up every ``LIVENESS_SECONDS`` (so a
waiting request checks its deadline and its worker); by an event loop, it
is non-blocking and waits in the loop's selector (:func:`ready`); one
connection serves either, one request at a time (:meth:`Connection.use`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import socket
import ssl
import struct
import time

import numpy as np

from inference.protocol import errors
from inference.workers import frames, link, messages
from inference.workers.placement import Worker

logger = logging.getLogger(__name__)

#: How often a waiting request checks its deadline and that its worker is still alive.
LIVENESS_SECONDS = 0.25
_SOCKET_TIMEO = struct.pack("ll", 0, int(LIVENESS_SECONDS * 1e6))
_HOSTNAME = socket.gethostname()
_CONNECT_SECONDS = 3.0
#: A pooled connection used this recently is not checked for a close before reuse.
_TRUSTED_SECONDS = 0.05
#: What a socket operation raises when it would block (or its timeout passed).
WOULD_BLOCK = (BlockingIOError, TimeoutError, ssl.SSLWantReadError, ssl.SSLWantWriteError)
POLL_CLOSED = select.POLLIN | select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)


class WorkerDraining(errors.ModelNotReady):
    """The worker said it is draining (told to stop): it takes no new request."""


class Connection:
    """A proven connection to one worker (:func:`connect`); ``used``: when it
    last answered (``time.monotonic()``); ``local``: a Unix socket;
    ``blocking``: set for a thread, clear for an event loop (:meth:`use`)."""

    __slots__ = ("blocking", "local", "reader", "shared", "sock", "tls", "used", "worker")

    def __init__(self, sock: socket.socket, worker: Worker, max_frame: int):
        self.sock = sock
        self.worker = worker
        self.reader = frames.Reader(sock, max_frame, messages.to_front_end)
        self.used = time.monotonic()
        self.tls = isinstance(sock, ssl.SSLSocket)
        self.local = sock.family == socket.AF_UNIX  # the worker is on this machine: memory can be shared
        self.shared: frames.SharedBuffer | None = None
        self.blocking: bool | None = None

    def use(self, blocking: bool) -> None:
        """Make the socket serve a thread (``blocking``: reads and writes give
        up every ``LIVENESS_SECONDS``) or an event loop (non-blocking)."""
        if self.blocking is blocking:
            return
        self.blocking = blocking
        sock = self.sock
        if not blocking:
            sock.setblocking(False)
        elif self.tls:
            sock.settimeout(LIVENESS_SECONDS)
        else:
            sock.settimeout(None)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _SOCKET_TIMEO)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _SOCKET_TIMEO)

    def encode(self, request, feeds: dict[str, np.ndarray], regions=None) -> list[memoryview]:
        """The request frame's byte views (a RunRequest or SegmentRequest):
        the tensors in the connection's shared memory when the worker is on
        this machine and they are large, else inline. ``regions`` (a
        RegionPlan, RunRequest only): tensors in clients' shared-memory
        regions, which a worker on this machine reads and writes itself
        (they are left out of the frame); for a worker elsewhere the inputs
        are read here and travel as usual. Raises InvalidInput (a region that
        shrank)."""
        if regions is not None:
            request.regions, request.output_regions = [], []
            if not self.local:
                feeds = regions.read_inputs(feeds)
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
        """True when the worker closed it (or sent something unasked, such as
        Draining after its last answer) while it sat idle. A connection that
        answered less than ``_TRUSTED_SECONDS`` ago is not asked the kernel
        (a syscall saved per request under load): a worker that died since
        fails the request it then gets, which then goes to another worker."""
        if self.reader.partial:
            return True  # bytes came after the last answer (read with it)
        if time.monotonic() - self.used < _TRUSTED_SECONDS:
            return False
        poller = select.poll()
        poller.register(self.sock.fileno(), POLL_CLOSED)
        return bool(poller.poll(0))

    def said_draining(self) -> bool:
        """Whether what an idle connection received is the worker's
        :class:`~inference.workers.messages.Draining` (call when it is
        readable; the connection is unusable after)."""
        try:
            message, _ = self.reader.frame()
        except (OSError, frames.FrameError, frames.BadHeader):
            return False
        return isinstance(message, messages.Draining)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _dtype(array: np.ndarray) -> str:
    """A numeric array's little-endian numpy type string (as frames describe tensors)."""
    dtype = array.dtype
    return (dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype).str


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


def open_socket(worker: Worker, tls: link.TLSFiles | None) -> socket.socket:
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


def connect(worker: Worker, tls: link.TLSFiles | None, max_frame: int, blocking: bool) -> Connection:
    """A new connection to ``worker`` (``tls``: this front end's
    certificate; ``max_frame``: the largest answer frame read), authenticated (it said hello), for
    a thread (``blocking``: reads give up every 0.25 s, so a waiting
    request checks its deadline and its worker) or an event loop.
    Raises ModelNotReady with the reason."""
    sock = None
    try:
        sock = open_socket(worker, tls)
        conn = Connection(sock, worker, max_frame)
        hello, _ = conn.reader.frame()
        if isinstance(hello, messages.Draining):
            sock.close()
            raise WorkerDraining(f"the {worker.queue} worker {worker.id} is draining: it takes no new request")
        if isinstance(hello, messages.ErrorAnswer):
            raise link.LinkRefused(f"it refused the connection: {hello.message}")
        if not isinstance(hello, messages.Hello):
            raise link.LinkRefused(f"it answered {type(hello).__name__} to a new connection")
        if hello.worker != worker.id:
            raise link.LinkRefused(f"it says it is the worker {hello.worker}")
        conn.use(blocking)
    except (OSError, frames.FrameError, frames.BadHeader) as exc:
        if sock is not None:
            sock.close()
        if isinstance(exc, ssl.SSLError):
            exc = link.LinkRefused(link.refusal_reason(exc))
        elif isinstance(exc, frames.FrameError):
            exc = link.LinkRefused(
                "it closed the connection before saying hello (this front end's certificate is not "
                "its deployment's, or it was stopping: see its log)"
            )
        if isinstance(exc, link.LinkRefused):
            logger.warning("not using the %s worker %s at %s: %s", worker.queue, worker.id, worker.address, exc)
        raise errors.ModelNotReady(f"cannot connect to the {worker.queue} worker {worker.id}: {exc}") from None
    return conn


async def ready(loop: asyncio.AbstractEventLoop, sock: socket.socket, writable: bool) -> bool:
    """Whether ``sock`` became readable (or writable) within
    ``LIVENESS_SECONDS``, waiting in the event loop's selector."""
    ready = loop.create_future()

    def wake(value: bool) -> None:
        if not ready.done():
            ready.set_result(value)

    fd = sock.fileno()
    add, remove = (loop.add_writer, loop.remove_writer) if writable else (loop.add_reader, loop.remove_reader)
    add(fd, wake, True)
    timer = loop.call_later(LIVENESS_SECONDS, wake, False)
    try:
        return await ready
    finally:
        remove(fd)
        timer.cancel()


def send_failed(conn: Connection, exc: BaseException | None) -> errors.ModelNotReady:
    """ModelNotReady for a request frame not sent whole (``exc``: why; None: refused); closes ``conn``."""
    conn.close()
    worker = conn.worker
    if exc is None:
        return errors.ModelNotReady(f"the {worker.queue} worker {worker.id} refused the request")
    return errors.ModelNotReady(f"cannot send to the {worker.queue} worker {worker.id}: {exc}")


def closed(conn: Connection) -> errors.ModelNotReady:
    """ModelNotReady for a worker that closed ``conn`` before answering; closes it."""
    conn.close()
    worker = conn.worker
    return errors.ModelNotReady(
        f"the {worker.queue} worker {worker.id} stopped before answering (its connection closed)"
    )
