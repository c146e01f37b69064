"""The socket server of an inference worker (``manage.py runworker``).

Front-end processes keep persistent connections to each worker (see
:mod:`inference.runtime.remote`): TLS over TCP from other machines, the Unix
socket on this one (:mod:`inference.runtime.link` says who may connect). A
connection carries one request at a time (:mod:`inference.runtime.frames`);
each has a thread here that reads a request, hands it to ``handle(request,
body, shared) -> buffers`` (the worker runtime: the model runner) and
writes the answer; many connections feed the model runner at once, which is
where requests meet (model instances, dynamic batching).

Bounded before anyone is authenticated: at most ``Limits.pending`` (and
``pending_per_peer``) connections may be in their handshake, which has one
deadline for the whole of it (``handshake_seconds``); nothing is read into
memory before it succeeds but what TLS itself reads (OpenSSL bounds a
handshake's messages). At most ``connections`` (and ``per_peer``)
connections in all; connections idle longer than ``idle_seconds`` are
closed (front ends drop theirs at half that). One watchdog thread enforces
the deadlines. The accept loop backs off when the process is out of file
descriptors or threads, and never dies.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from inference.runtime import frames, link, messages

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    """How many connections a worker holds, and for how long."""

    connections: int = 1024
    per_peer: int = 256
    pending: int = 64
    pending_per_peer: int = 16
    handshake_seconds: float = 5.0
    idle_seconds: float = 300.0


#: errno values of accept() that mean "out of a resource": wait, then retry.
_EXHAUSTED = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


class _Throttled:
    """A log line per cause at most every ``seconds``, with how many were left out."""

    def __init__(self, seconds: float = 10.0):
        self.seconds = seconds
        self._last: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()

    def warning(self, cause: str, message: str, *args) -> None:
        now = time.monotonic()
        with self._lock:
            last, skipped = self._last.get(cause, (float("-inf"), 0))
            if now - last < self.seconds:
                self._last[cause] = (last, skipped + 1)
                return
            self._last[cause] = (now, 0)
        if skipped:
            message += f" ({skipped} more like it in the last {self.seconds:.0f} s)"
        logger.warning(message, *args)


class _PortCheck(Exception):
    """A TCP connection closed before it sent anything (a probe of the port)."""


class _Connection:
    """One accepted connection as the watchdog sees it."""

    __slots__ = ("authenticated", "busy", "deadline", "last", "peer", "sock")

    def __init__(self, sock: socket.socket, peer: str, deadline: float):
        self.sock = sock
        self.peer = peer
        self.deadline = deadline  # of the handshake
        self.authenticated = False
        self.busy = False
        self.last = time.monotonic()

    def cut(self) -> None:
        """Wake whatever blocks on the socket (the connection's thread then
        closes it). The plain socket's shutdown: an SSLSocket's own would
        race with the thread reading it."""
        try:
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)
        except OSError:
            pass


class WorkerServer:
    """Accepts front-end connections on its Unix socket ``unix_path`` (same
    machine) and, with ``tls``, on ``address`` ((host, port); port 0: any
    free port); serves each in a thread of its own (see module doc)."""

    def __init__(
        self,
        handle: Callable,
        *,
        worker_id: str,
        device: str,
        max_frame: int,
        address: tuple[str, int] | None = None,
        tls: link.TLSFiles | None = None,
        unix_path: str | None = None,
        limits: Limits = Limits(),
    ):
        if address is not None and tls is None:
            raise link.LinkConfigError("a worker listens on TCP only with TLS (WORKER_TLS_CA/CERT/KEY)")
        if address is None and not unix_path:
            raise link.LinkConfigError("a worker needs a TCP address (with TLS) or a Unix socket")
        self.handle = handle
        self.worker_id = worker_id
        self.device = device
        self.max_frame = max_frame
        self.limits = limits
        self._tls = tls.server_context if tls is not None else None
        self._uid = os.getuid()
        self._listeners: list[socket.socket] = []
        self.address: tuple[str, int] | None = None
        if address is not None:
            listener = socket.create_server(address, backlog=512)
            self.address = listener.getsockname()[:2]
            self._listeners.append(listener)
        self.unix_path = unix_path
        if unix_path:
            self._listeners.append(_unix_listener(unix_path))
        self._connections: set[_Connection] = set()
        self._lock = threading.Lock()
        self._busy = 0
        self.served = 0  # requests answered since start
        self._stopping = threading.Event()
        self._idle = threading.Condition(self._lock)
        self._log = _Throttled()

    @property
    def busy(self) -> int:
        """Requests being handled now."""
        return self._busy

    def start(self) -> None:
        for listener in self._listeners:
            threading.Thread(target=self._accept, args=(listener,), name="worker-accept", daemon=True).start()
        threading.Thread(target=self._watch, name="worker-watchdog", daemon=True).start()

    # -- accepting -----------------------------------------------------------
    def _accept(self, listener: socket.socket) -> None:
        """Accept until stopped; out of descriptors (or threads), back off
        (50 ms doubling to 1 s) and try again; never dies."""
        backoff = 0.0
        while not self._stopping.is_set():
            try:
                sock, address = listener.accept()
            except OSError as exc:
                if self._stopping.is_set():
                    return
                if exc.errno in _EXHAUSTED:
                    backoff = min(1.0, max(0.05, 2 * backoff))
                    self._log.warning("exhausted", "accepting connections: %s; retrying in %.2f s", exc, backoff)
                    self._stopping.wait(backoff)
                else:
                    self._log.warning("accept", "accepting a connection failed: %s", exc)
                continue
            backoff = 0.0
            try:
                self._admit(sock, address[0] if isinstance(address, tuple) else "this machine")
            except Exception as exc:  # e.g. RuntimeError: can't start new thread
                self._log.warning("admit", "dropped a connection: %s", exc)
                sock.close()
                self._stopping.wait(0.05)

    def _admit(self, sock: socket.socket, peer: str) -> None:
        """Take the connection if the limits allow (else close it at once) and
        start its thread."""
        limits = self.limits
        with self._lock:
            held = [c for c in self._connections if c.peer == peer]
            pending = sum(1 for c in self._connections if not c.authenticated)
            refused = (
                len(self._connections) >= limits.connections
                or len(held) >= limits.per_peer
                or pending >= limits.pending
                or sum(1 for c in held if not c.authenticated) >= limits.pending_per_peer
            )
            if not refused:
                record = _Connection(sock, peer, time.monotonic() + limits.handshake_seconds)
                self._connections.add(record)
        if refused:
            self._log.warning("limit", "refused a connection from %s: at the worker's connection limits", peer)
            sock.close()
            return
        if sock.family != socket.AF_UNIX:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            threading.Thread(target=self._serve, args=(record,), name="worker-conn", daemon=True).start()
        except BaseException:
            self._forget(record)
            raise

    def _forget(self, record: _Connection) -> None:
        with self._lock:
            self._connections.discard(record)

    def _watch(self) -> None:
        """The watchdog: cuts handshakes past their deadline and connections
        idle past ``idle_seconds``."""
        while not self._stopping.wait(0.5):
            now = time.monotonic()
            with self._lock:
                late = [
                    c for c in self._connections
                    if (not c.authenticated and now > c.deadline)
                    or (c.authenticated and not c.busy and now - c.last > self.limits.idle_seconds)
                ]  # fmt: skip
            for record in late:
                record.cut()

    # -- one connection --------------------------------------------------------
    def _authenticate(self, record: _Connection) -> socket.socket:
        """The connection's socket once the peer proved itself (TLS client
        certificate of the deployment's CA, or a Unix peer of this user);
        raises LinkRefused or OSError."""
        sock = record.sock
        sock.settimeout(self.limits.handshake_seconds)  # per step; the watchdog bounds the whole
        if sock.family == socket.AF_UNIX:
            link.check_local_peer(sock, self._uid)
        else:
            if not sock.recv(1, socket.MSG_PEEK):
                raise _PortCheck()  # connected and closed without a byte: a liveness probe
            sock = record.sock = self._tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            try:
                sock.do_handshake()
            except ssl.SSLError as exc:
                raise link.LinkRefused(link.refusal_reason(exc)) from None
        frames.send(sock, frames.encode(messages.Hello(self.worker_id, self.device)))
        sock.settimeout(None)
        return sock

    def _serve(self, record: _Connection) -> None:
        try:
            try:
                sock = self._authenticate(record)
            except _PortCheck:
                return
            except (link.LinkRefused, OSError, ValueError) as exc:
                if not self._stopping.is_set():
                    cause = f"refused {record.peer} {str(exc)[:80]}"  # once per peer and reason per 10 s
                    self._log.warning(cause, "refused a connection from %s: %s", record.peer, exc)
                return
            with self._lock:
                record.authenticated = True
                record.last = time.monotonic()
            self._requests(sock, record)
        finally:
            self._forget(record)
            record.sock.close()

    def _requests(self, sock: socket.socket, record: _Connection) -> None:
        """Answer the connection's requests until it closes."""
        reader = frames.Reader(sock, self.max_frame, messages.to_worker, fds=sock.family == socket.AF_UNIX)
        shared = None
        try:
            while not self._stopping.is_set():
                try:
                    message, body = reader.frame()
                except frames.BadHeader as exc:
                    reader.close_fds()
                    frames.send(sock, frames.encode(messages.ErrorAnswer("INVALID_ARGUMENT", exc.message)))
                    continue
                except (frames.FrameError, OSError):
                    return  # the front end went away (or we are stopping, or the watchdog cut it)
                if isinstance(message, messages.ShareMemory):
                    shared = self._attach(reader, message.size, record.peer) or shared
                    continue
                reader.close_fds()  # descriptors sent with a request mean nothing: not kept open
                with self._lock:
                    self._busy += 1
                    record.busy = True
                try:
                    frames.send(sock, self.handle(message, body, shared))
                except OSError:
                    return  # the front end gave up on this request (deadline) and closed
                finally:
                    with self._lock:
                        self._busy -= 1
                        self.served += 1
                        record.busy = False
                        record.last = time.monotonic()
                        self._idle.notify_all()
        finally:
            reader.close_fds()

    def _attach(self, reader: frames.Reader, size: int, peer: str) -> frames.SharedBuffer | None:
        """The shared memory a front end announced: exactly one sealed memfd
        of at least ``size`` bytes, at most the frame limit; anything else
        is refused (requests that then name it answer INVALID_ARGUMENT).
        Every descriptor received is closed here."""
        received, reader.fds[:] = list(reader.fds), []
        try:
            if len(received) != 1:
                raise ValueError(f"{len(received)} descriptors, not 1")
            return frames.SharedBuffer.attach(received[0], size, self.max_frame)
        except (OSError, ValueError) as exc:
            self._log.warning("shared", "refused shared memory from %s: %s", peer, exc)
            return None
        finally:
            for fd in received:
                os.close(fd)

    def stop(self, grace: float = 10.0) -> None:
        """Stop accepting, let requests being handled finish (up to ``grace``
        seconds), then close every connection."""
        self._stopping.set()
        for listener in self._listeners:
            try:
                listener.close()
            except OSError:
                pass
        if self.unix_path and os.path.exists(self.unix_path):
            os.unlink(self.unix_path)
        with self._lock:
            self._idle.wait_for(lambda: self._busy == 0, timeout=grace)
            records = list(self._connections)
        for record in records:
            record.cut()


def _unix_listener(path: str) -> socket.socket:
    """A Unix socket at ``path`` that only this user can connect to (0600
    from the start: the umask covers the window before chmod)."""
    if os.path.exists(path):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        listener.bind(path)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    listener.listen(512)
    return listener
