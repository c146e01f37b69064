"""The socket server of an inference worker (``manage.py runworker``).

Front-end processes keep persistent connections to each worker (see
:mod:`inference.workers.client.executor`): TLS over TCP from other machines, the Unix
socket on this one (:mod:`inference.workers.link` says who may connect). A
connection carries one request at a time (:mod:`inference.workers.frames`);
each has a thread here that reads a request, hands it to ``handle(request,
body, shared) -> buffers`` (the worker runtime: the model runner) and
writes the answer; many connections feed the model runner at once, which is
where requests meet (model instances, dynamic batching).

Bounded before anyone is authenticated: handshakes and authenticated
connections have budgets of their own (:mod:`inference.workers.server.admission`:
handshakes per source address and in all, a flood displacing only itself;
connections per authenticated front end and in all); a handshake has one
deadline for the whole of it (``handshake_seconds``); nothing is read into
memory before it succeeds but what TLS itself reads (OpenSSL bounds a
handshake's messages). A connection refused at a limit after it
authenticated is told why (an ErrorAnswer instead of the Hello).
Connections idle longer than ``idle_seconds`` are closed (front ends drop
theirs at half that). One watchdog thread enforces the deadlines. The
accept loop backs off when the process is out of file descriptors or
threads, and never dies.

Draining (:meth:`WorkerServer.drain`): no request that arrives after it is
run; each is answered :class:`~inference.workers.messages.Draining` (the
front end sends it to another worker), as is a new connection instead of
its Hello; a request being handled is answered, then Draining follows on
its connection. :meth:`WorkerServer.wait_drained` waits for those answers.
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

from inference.workers import frames, link, messages
from inference.workers.server.admission import Admission, Limits, local_identity, tls_identity

__all__ = ["Limits", "WorkerServer"]

logger = logging.getLogger(__name__)


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
    """One accepted connection as the watchdog sees it (``peer``: its source
    address; ``identity``: the authenticated front end's, once it is)."""

    __slots__ = ("authenticated", "busy", "deadline", "identity", "last", "peer", "sock", "started")

    def __init__(self, sock: socket.socket, peer: str, deadline: float):
        self.sock = sock
        self.peer = peer
        self.deadline = deadline  # of the handshake
        self.authenticated = False
        self.identity: str | None = None
        self.busy = False
        self.started = self.last = time.monotonic()

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
        limits: Limits | None = None,
    ):
        if address is not None and tls is None:
            raise link.LinkConfigError("a worker listens on TCP only with TLS (WORKER_TLS_CA/CERT/KEY)")
        if address is None and not unix_path:
            raise link.LinkConfigError("a worker needs a TCP address (with TLS) or a Unix socket")
        self.handle = handle
        self.worker_id = worker_id
        self.device = device
        self.max_frame = max_frame
        self.limits = limits = limits or Limits()
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
            self._listeners.append(link.unix_listener(unix_path))
        self._connections: set[_Connection] = set()
        self._admission = Admission(limits)
        self._lock = threading.Lock()
        self._busy = 0
        self.served = 0  # requests answered since start
        self._stopping = threading.Event()
        self.draining = False  # told to stop: no new request runs
        self._idle = threading.Condition(self._lock)
        self._log = _Throttled()

    @property
    def busy(self) -> int:
        """Requests being handled now."""
        return self._busy

    @property
    def connections(self) -> int:
        """Authenticated connections held now."""
        return self._admission.authenticated

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
        start its thread: a Unix socket's peer is known now (one of this
        user's processes, counted per process); a TCP connection starts its
        handshake if the handshake budget allows (displacing another, maybe:
        see :class:`~inference.workers.server.admission.Admission`)."""
        record = _Connection(sock, peer, time.monotonic() + self.limits.handshake_seconds)
        displaced, refusal = None, None
        if sock.family == socket.AF_UNIX:
            try:
                pid, uid = link.peer_credentials(sock)
            except OSError as exc:
                self._log.warning("accept", "dropped a connection on the Unix socket: %s", exc)
                sock.close()
                return
            if uid != self._uid:
                self._log.warning(f"uid {uid}", "refused a connection from process %s: it runs as uid %s, not %s",
                                  pid, uid, self._uid)  # fmt: skip
                sock.close()
                return
            identity = local_identity(pid, uid)
            with self._lock:
                refusal = self._admission.authenticate(record, identity)
                if refusal is None:
                    record.authenticated = True
                    self._connections.add(record)
        else:
            with self._lock:
                admitted, displaced = self._admission.handshake(record)
                if admitted:
                    self._connections.add(record)
            if not admitted:
                self._log.warning("limit", "refused a connection from %s: at the worker's connection limits "
                                  "for handshakes", peer)  # fmt: skip
                sock.close()
                return
            if displaced is not None:
                displaced.cut()  # its thread ends and forgets it
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if refusal is not None:
            self._refuse(sock, identity, refusal)
            return
        try:
            threading.Thread(target=self._serve, args=(record,), name="worker-conn", daemon=True).start()
        except BaseException:
            self._forget(record)
            raise

    def _refuse(self, sock: socket.socket, identity: str, why: str) -> None:
        """Tell an authenticated peer why its connection is refused, then close it."""
        self._log.warning(f"limit {why[:60]}", "refused a connection from %s: at the worker's connection limits: %s",
                          identity, why)  # fmt: skip
        try:
            sock.settimeout(1.0)
            frames.send(sock, frames.encode(messages.ErrorAnswer("UNAVAILABLE", f"{why}: try again")))
        except OSError:
            pass
        finally:
            sock.close()

    def _forget(self, record: _Connection) -> None:
        with self._lock:
            self._connections.discard(record)
            self._admission.forget(record)

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
    def _authenticate(self, record: _Connection) -> socket.socket | None:
        """The connection's socket once the peer proved itself (TLS client
        certificate of the deployment's CA; a Unix peer was checked on
        accept) and was counted against its limits and said hello to; None
        when it was refused at a limit or the worker drains (it was told).
        Raises LinkRefused or OSError."""
        sock = record.sock
        sock.settimeout(self.limits.handshake_seconds)  # per step; the watchdog bounds the whole
        if sock.family != socket.AF_UNIX:
            if not sock.recv(1, socket.MSG_PEEK):
                raise _PortCheck()  # connected and closed without a byte: a liveness probe
            sock = record.sock = self._tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            try:
                sock.do_handshake()
            except ssl.SSLError as exc:
                raise link.LinkRefused(link.refusal_reason(exc)) from None
            identity = tls_identity(sock, record.peer)
            with self._lock:
                self._admission.handshake_over(record)
                refusal = self._admission.authenticate(record, identity)
                record.authenticated = refusal is None
            if refusal is not None:
                self._refuse(sock, identity, refusal)
                return None
        hello = messages.Draining(self.worker_id) if self.draining else messages.Hello(self.worker_id, self.device)
        frames.send(sock, frames.encode(hello))
        sock.settimeout(None)
        return None if self.draining else sock

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
            if sock is None:
                return
            with self._lock:
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
                    if self.draining:  # not run: the front end sends it elsewhere
                        break
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
                if self.draining:
                    break
            else:
                return
            self._tell_draining(sock)
        finally:
            reader.close_fds()

    def _tell_draining(self, sock: socket.socket) -> None:
        """Say Draining on a connection (its last frame; the caller closes it)."""
        try:
            frames.send(sock, frames.encode(messages.Draining(self.worker_id)))
        except OSError:
            pass

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

    # -- stopping ------------------------------------------------------------------
    def drain(self) -> None:
        """Take no new request from now on (see module doc); returns at once."""
        with self._lock:
            self.draining = True

    def wait_drained(self, grace: float) -> bool:
        """Wait until no request is being handled (at most ``grace``
        seconds); whether none is."""
        with self._lock:
            return self._idle.wait_for(lambda: self._busy == 0, timeout=grace)

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
