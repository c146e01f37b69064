"""The socket server of an inference worker (``manage.py runworker``).

Front-end processes keep persistent connections to each worker (see
:mod:`inference.runtime.remote`); a connection carries one request at a
time, as :mod:`inference.runtime.frames`. One I/O thread watches every
connection (epoll, through :mod:`selectors`) and reads request frames as
they arrive. A request for a version whose runs are short (``inline``:
microseconds, no dynamic batching) is run and answered on that thread, with
no thread hand-off; any other request goes to a thread pool, whose thread
runs it on the model runner (where requests meet: model instances, dynamic
batching) and answers, and the connection is watched again once answered.

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
import queue
import selectors
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from inference.runtime import frames

logger = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 10.0
#: Threads running requests that are not run inline (slow models wait for
#: instances and batches there; threads are made on demand).
POOL_THREADS = 256


def transport_key(secret: str) -> bytes:
    """The connection key of a deployment, derived from its SECRET_KEY."""
    return hmac.new(secret.encode(), b"modelhost worker transport v1", hashlib.sha256).digest()


def proof(key: bytes, nonce: bytes) -> bytes:
    return hmac.new(key, nonce, hashlib.sha256).digest()


class _Peer:
    """A front-end connection: its reader, and answer bytes not yet sent."""

    __slots__ = ("out", "reader", "sock")

    def __init__(self, sock: socket.socket, reader: frames.Reader):
        self.sock = sock
        self.reader = reader
        self.out: list[memoryview] = []


class WorkerServer:
    """Accepts front-end connections on ``address`` ((host, port); port 0:
    any free port), and on the Unix socket ``unix_path`` when given (front
    ends on the same host use it). ``handle(header, body) -> buffers``
    answers one request; ``inline(header) -> bool`` says whether it may run
    on the I/O thread (default: never)."""

    def __init__(
        self,
        address: tuple[str, int],
        key: bytes,
        handle: Callable,
        max_frame: int,
        unix_path: str | None = None,
        inline: Callable[[dict], bool] | None = None,
    ):
        self.key = key
        self.handle = handle
        self.inline = inline or (lambda header: False)
        self.max_frame = max_frame
        listener = socket.create_server(address, reuse_port=False, backlog=512)
        self.address = listener.getsockname()[:2]
        self.unix_path = unix_path
        self._listeners = [listener]
        if unix_path:
            if os.path.exists(unix_path):
                os.unlink(unix_path)
            unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            unix.bind(unix_path)
            os.chmod(unix_path, 0o600)
            unix.listen(512)
            self._listeners.append(unix)
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._ready: queue.SimpleQueue[_Peer] = queue.SimpleQueue()  # peers to watch again
        self._pool = ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="worker-run")
        self._peers: set[_Peer] = set()
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
            listener.setblocking(False)
            self._selector.register(listener, selectors.EVENT_READ, "listen")
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        threading.Thread(target=self._loop, name="worker-io", daemon=True).start()

    # -- the I/O thread ----------------------------------------------------
    def _loop(self) -> None:
        while not self._stopping.is_set():
            for key, mask in self._selector.select(timeout=1.0):
                if key.data == "listen":
                    self._accept(key.fileobj)
                elif key.data == "wake":
                    self._rewatch()
                elif mask & selectors.EVENT_WRITE:
                    self._flush(key.data)
                else:
                    self._read(key.data)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, peer = listener.accept()
            except BlockingIOError:
                return
            except OSError:
                if not self._stopping.is_set():
                    logger.exception("accepting a connection failed")
                return
            if conn.family != socket.AF_UNIX:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            where = peer[0] if isinstance(peer, tuple) else "a local process"
            threading.Thread(target=self._handshake, args=(conn, where), name="worker-hello", daemon=True).start()

    def _rewatch(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass
        while True:
            try:
                peer = self._ready.get_nowait()
            except queue.Empty:
                return
            self._selector.register(peer.sock, selectors.EVENT_READ, peer)
            if peer.reader.partial:  # bytes already read (e.g. a request sent right after the handshake)
                self._read(peer)

    def _read(self, peer: _Peer) -> None:
        while True:
            try:
                header, body = peer.reader.frame()
            except BlockingIOError:
                return  # the rest of the frame is still on its way
            except (frames.FrameError, OSError):
                self._drop(peer)  # the front end went away
                return
            if not self.inline(header):
                self._selector.unregister(peer.sock)  # the pool thread owns it until it answered
                self._pool.submit(self._run, peer, header, body)
                return
            self._send(peer, self._answer(header, body))
            if peer.out or not peer.reader.partial:
                return  # wait for the socket (to write, or for the next request)

    def _send(self, peer: _Peer, buffers: list) -> None:
        """Send an answer on the I/O thread; what the socket does not take now
        is sent when it is writable."""
        views = [memoryview(b).cast("B") for b in buffers]
        try:
            frames.send_views(peer.sock, views)
        except BlockingIOError:
            peer.out = views  # what is left
            self._selector.modify(peer.sock, selectors.EVENT_WRITE, peer)
        except OSError:
            self._drop(peer)

    def _flush(self, peer: _Peer) -> None:
        try:
            frames.send_views(peer.sock, peer.out)
        except BlockingIOError:
            return  # peer.out holds what is left
        except OSError:
            self._drop(peer)
            return
        peer.out = []
        self._selector.modify(peer.sock, selectors.EVENT_READ, peer)

    def _drop(self, peer: _Peer) -> None:
        try:
            self._selector.unregister(peer.sock)
        except (KeyError, ValueError):
            pass
        with self._lock:
            self._peers.discard(peer)
        peer.sock.close()

    # -- requests ------------------------------------------------------------
    def _answer(self, header: dict, body) -> list:
        with self._lock:
            self._busy += 1
        try:
            return self.handle(header, body)
        finally:
            with self._lock:
                self._busy -= 1
                self.served += 1
                self._idle.notify_all()

    def _run(self, peer: _Peer, header: dict, body) -> None:
        """A pool thread: run, answer (blocking), hand the connection back."""
        answer = self._answer(header, body)
        try:
            peer.sock.setblocking(True)
            frames.send(peer.sock, answer)
            peer.sock.setblocking(False)
        except OSError:
            with self._lock:
                self._peers.discard(peer)
            peer.sock.close()  # the front end gave up on this request (deadline) and closed
            return
        self._ready.put(peer)
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass

    def _handshake(self, conn: socket.socket, where: str) -> None:
        reader = frames.Reader(conn, self.max_frame)
        nonce = os.urandom(16)
        try:
            conn.settimeout(HANDSHAKE_TIMEOUT)
            frames.send(conn, frames.encode({"challenge": nonce}))
            header, _ = reader.frame()
            answer = header.get("proof")
            if not (isinstance(answer, bytes) and hmac.compare_digest(answer, proof(self.key, nonce))):
                logger.warning("refused a connection from %s: wrong transport key", where)
                conn.close()
                return
            conn.setblocking(False)
        except (frames.FrameError, OSError):
            conn.close()
            return
        peer = _Peer(conn, reader)
        with self._lock:
            if self._stopping.is_set():
                conn.close()
                return
            self._peers.add(peer)
        self._ready.put(peer)
        self._wake_w.send(b"\0")

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
            for peer in list(self._peers):
                try:
                    peer.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        self._pool.shutdown(wait=False, cancel_futures=True)
