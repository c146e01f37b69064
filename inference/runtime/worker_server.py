"""The socket server of an inference worker (``manage.py runworker``).

Front-end processes keep persistent TCP connections to each worker (see
:mod:`inference.runtime.remote`); a connection carries one request at a time,
as :mod:`inference.runtime.frames`. Each connection has a thread here that
reads a request, hands it to ``handle(header, body) -> buffers`` (the
worker runtime: the model runner) and writes the answer; many connections
feed the model runner at once, which is where requests meet (model
instances, dynamic batching).

A connection starts with a challenge: the worker sends a random nonce, the
client answers HMAC-SHA256(key, nonce) with the key both derive from
SECRET_KEY; a wrong answer closes the connection. Only front ends of the
same deployment can send work.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import socket
import threading
from collections.abc import Callable

from inference.runtime import frames

logger = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 10.0


def transport_key(secret: str) -> bytes:
    """The connection key of a deployment, derived from its SECRET_KEY."""
    return hmac.new(secret.encode(), b"modelhost worker transport v1", hashlib.sha256).digest()


def proof(key: bytes, nonce: bytes) -> bytes:
    return hmac.new(key, nonce, hashlib.sha256).digest()


class WorkerServer:
    """Accepts front-end connections on ``address`` ((host, port); port 0:
    any free port), and on the Unix socket ``unix_path`` when given (front
    ends on the same host use it), and serves each in a thread of its own."""

    def __init__(
        self, address: tuple[str, int], key: bytes, handle: Callable, max_frame: int, unix_path: str | None = None
    ):
        self.key = key
        self.handle = handle
        self.max_frame = max_frame
        self._listener = socket.create_server(address, reuse_port=False, backlog=512)
        self.address = self._listener.getsockname()[:2]
        self.unix_path = unix_path
        self._listeners = [self._listener]
        if unix_path:
            if os.path.exists(unix_path):
                os.unlink(unix_path)
            unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            unix.bind(unix_path)
            os.chmod(unix_path, 0o600)
            unix.listen(512)
            self._listeners.append(unix)
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._busy = 0
        self.served = 0  # requests answered since start
        self._stopping = threading.Event()
        self._idle = threading.Condition(self._lock)

    @property
    def busy(self) -> int:
        """Requests being handled now."""
        return self._busy

    def start(self) -> None:
        for listener in self._listeners:
            threading.Thread(target=self._accept, args=(listener,), name="worker-accept", daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while not self._stopping.is_set():
            try:
                conn, peer = listener.accept()
            except OSError:
                if self._stopping.is_set():
                    return
                logger.exception("accepting a connection failed")
                continue
            if conn.family != socket.AF_UNIX:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peer = peer[0] if isinstance(peer, tuple) else "a local process"
            threading.Thread(target=self._serve, args=(conn, peer), name="worker-conn", daemon=True).start()

    def _serve(self, conn: socket.socket, peer) -> None:
        with self._lock:
            self._connections.add(conn)
        try:
            reader = frames.Reader(conn, self.max_frame, fds=conn.family == socket.AF_UNIX)
            if not self._handshake(conn, reader):
                logger.warning("refused a connection from %s: wrong transport key", peer)
                return
            shared = None
            while not self._stopping.is_set():
                try:
                    header, body = reader.frame()
                except (frames.FrameError, OSError):
                    return  # the front end went away (or we are stopping)
                if "model" not in header:  # not a request: shared memory announced
                    shared = self._attach(reader.fds, header.get("shared"), peer) or shared
                    continue
                while reader.fds:  # descriptors sent with a request mean nothing: not kept open
                    os.close(reader.fds.pop())
                with self._lock:
                    self._busy += 1
                try:
                    frames.send(conn, self.handle(header, body, shared))
                except OSError:
                    return  # the front end gave up on this request (deadline) and closed
                finally:
                    with self._lock:
                        self._busy -= 1
                        self.served += 1
                        self._idle.notify_all()
        finally:
            with self._lock:
                self._connections.discard(conn)
            conn.close()

    def _attach(self, fds: list[int], size, peer) -> frames.SharedBuffer | None:
        """The shared memory a front end announced (:func:`frames.send_shared`):
        one descriptor of at least ``size`` bytes, at most the frame limit;
        anything else is refused (its requests then answer INVALID_ARGUMENT)."""
        received, fds[:] = list(fds), []
        try:
            if (
                len(received) == 1 and type(size) is int and 0 < size <= self.max_frame
                and os.fstat(received[0]).st_size >= size
            ):  # fmt: skip
                return frames.SharedBuffer(received[0], size)
            logger.warning("refused shared memory from %s: %d descriptor(s), %r bytes", peer, len(received), size)
            return None
        except (OSError, ValueError) as exc:
            logger.warning("refused shared memory from %s: %s", peer, exc)
            return None
        finally:
            for fd in received:
                os.close(fd)

    def _handshake(self, conn: socket.socket, reader: frames.Reader) -> bool:
        nonce = os.urandom(16)
        conn.settimeout(HANDSHAKE_TIMEOUT)
        try:
            frames.send(conn, frames.encode({"challenge": nonce}))
            header, _ = reader.frame()
        except (frames.FrameError, OSError):
            return False
        conn.settimeout(None)
        answer = header.get("proof")
        return isinstance(answer, bytes) and hmac.compare_digest(answer, proof(self.key, nonce))

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
            for conn in list(self._connections):
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
