"""Worker mode, front-end side: each front-end process's bounded pool of
connections to each worker (:mod:`inference.workers.client.executor` runs requests
over them).

A process holds at most ``cap`` connections to one worker
(``WORKER_CONNECTIONS_PER_PROCESS``), whatever its load: a request takes an
idle one, or opens one while fewer than ``cap`` are open, or else waits,
first come first served, for one another request gives back (bounded by its
deadline; see :class:`Waiter`). A burst therefore costs the worker at most
``cap`` connections (and threads) per front-end process, never one per
request in flight, and never more than the worker's per-peer limit.

Idle connections are closed by :meth:`ConnectionPool.sweep` (a daemon
thread, every ``SWEEP_SECONDS``) once idle for ``idle_seconds``, or as soon
as the worker closed them or said it is draining
(:class:`~inference.workers.messages.Draining`), not only when a request
picks them.
"""

from __future__ import annotations

import asyncio
import logging
import select
import threading
import time
from collections import deque
from collections.abc import Callable

from inference.workers.client.connections import POLL_CLOSED, Connection
from inference.workers.placement import Worker

logger = logging.getLogger(__name__)

#: How often idle connections are looked at.
SWEEP_SECONDS = 1.0
#: A waiting request checks its deadline and its worker at least this often.
WAIT_SLICE_SECONDS = 1.0


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


class Waiter:
    """A request waiting for a connection to ``worker``. :attr:`grant`
    becomes a Connection (another request gave it back) or the Worker (a
    connection closed: this request may open one) when the pool serves it;
    a thread waits with :meth:`wait`, an event loop with :meth:`wait_async`,
    each for a slice of time (:meth:`slice`: at most ``WAIT_SLICE_SECONDS``,
    never past ``deadline``), so that the request checks its deadline and
    its worker in between."""

    __slots__ = ("_event", "_wake", "deadline", "grant", "worker")

    def __init__(self, worker: Worker, deadline: float = float("inf")):
        self.worker = worker
        self.deadline = deadline  # time.monotonic()
        self.grant: Connection | Worker | None = None
        self._event = threading.Event()
        self._wake: tuple | None = None  # (loop, future) of an event loop waiting

    def slice(self) -> float:
        """How long to wait before looking at the deadline and the worker again (s)."""
        return min(WAIT_SLICE_SECONDS, max(0.0, self.deadline - time.monotonic()))

    def deliver(self, grant: Connection | Worker) -> None:
        """Serve the waiter (under the pool's lock)."""
        self.grant = grant
        self._event.set()
        wake = self._wake
        if wake is not None:
            wake[0].call_soon_threadsafe(_resolve, wake[1])

    def wait(self, seconds: float) -> bool:
        """Whether it was served within ``seconds`` (in this thread)."""
        return self._event.wait(seconds)

    async def wait_async(self, seconds: float) -> bool:
        """:meth:`wait` on an event loop."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._wake = (loop, future)
        if not self._event.is_set():  # else served before it could wake this loop
            timer = loop.call_later(seconds, _resolve, future)
            try:
                await future
            finally:
                timer.cancel()
        self._wake = None
        return self._event.is_set()


class ConnectionPool:
    """The connections of this process to each worker, at most ``cap`` per
    worker (see module doc); thread-safe. ``on_draining(worker_id)`` is
    called when an idle connection tells the worker is draining."""

    def __init__(self, cap: int, idle_seconds: float, on_draining: Callable[[str], None] = lambda worker_id: None):
        if cap < 1:
            raise ValueError(f"a pool of {cap} connections per worker cannot serve (WORKER_CONNECTIONS_PER_PROCESS)")
        self.cap = cap
        self.idle_seconds = idle_seconds
        self.on_draining = on_draining
        self._lock = threading.Lock()
        self._idle: dict[str, list[Connection]] = {}  # worker id -> idle connections, the last used last
        self._open: dict[str, int] = {}  # worker id -> connections open, being opened or in use
        self._waiters: dict[str, deque[Waiter]] = {}
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Sweep idle connections from a daemon thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="worker-pool-sweep", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(SWEEP_SECONDS)
            try:
                self.sweep()
            except Exception:  # never let the sweep die
                logger.exception("sweeping idle worker connections failed")

    def open_count(self, worker_id: str) -> int:
        """Connections to the worker open now (idle, in use or being opened)."""
        return self._open.get(worker_id, 0)

    # -- taking and giving back ---------------------------------------------------
    def take(self, worker: Worker) -> Connection | Worker | None:
        """An idle connection to ``worker`` that is still open; else
        ``worker`` itself when fewer than ``cap`` are open (the caller opens
        one, and owns that place: :meth:`give` the connection or
        :meth:`release` the place); else None (:meth:`wait`)."""
        while True:
            with self._lock:
                idle = self._idle.get(worker.id)
                if idle:
                    conn = idle.pop()
                elif self._open.get(worker.id, 0) < self.cap and not self._waiters.get(worker.id):
                    self._open[worker.id] = self._open.get(worker.id, 0) + 1
                    return worker
                else:
                    return None
            if time.monotonic() - conn.used < self.idle_seconds:
                if not conn.closed_by_peer():
                    return conn
                if conn.said_draining():
                    self.on_draining(worker.id)
            self._discard(conn)

    def wait(self, worker: Worker, deadline: float = float("inf")) -> Waiter:
        """Queue for the next connection to ``worker`` given back or closed,
        until ``deadline`` (``time.monotonic()``; call :meth:`cancel` when
        giving up)."""
        waiter = Waiter(worker, deadline)
        with self._lock:
            self._waiters.setdefault(worker.id, deque()).append(waiter)
        return waiter

    def cancel(self, waiter: Waiter) -> None:
        """The waiter gave up: out of the queue; what it was granted meanwhile
        goes to the next one."""
        with self._lock:
            queue = self._waiters.get(waiter.worker.id)
            if queue is not None and waiter in queue:
                queue.remove(waiter)
            grant, waiter.grant = waiter.grant, None
        if isinstance(grant, Connection):
            self.give(grant)
        elif grant is not None:
            self.release(grant)

    def give(self, conn: Connection) -> None:
        """A connection that answered, free again: to the first waiter, else idle."""
        conn.used = time.monotonic()
        with self._lock:
            waiter = self._next_waiter(conn.worker.id)
            if waiter is not None:
                waiter.deliver(conn)
            else:
                self._idle.setdefault(conn.worker.id, []).append(conn)

    def release(self, worker: Worker) -> None:
        """A connection to ``worker`` was closed (or could not be opened): its
        place goes to the first waiter, else it is free."""
        with self._lock:
            waiter = self._next_waiter(worker.id)
            if waiter is not None:
                waiter.deliver(worker)
                return
            left = self._open.get(worker.id, 0) - 1
            if left > 0:
                self._open[worker.id] = left
            else:
                self._open.pop(worker.id, None)
                self._idle.pop(worker.id, None)

    def _next_waiter(self, worker_id: str) -> Waiter | None:
        queue = self._waiters.get(worker_id)
        if not queue:
            return None
        waiter = queue.popleft()
        if not queue:
            del self._waiters[worker_id]
        return waiter

    def _discard(self, conn: Connection) -> None:
        conn.close()
        self.release(conn.worker)

    # -- closing idle connections -----------------------------------------------
    def forget(self, worker_id: str) -> None:
        """Close every idle connection to the worker (it is draining or gone)."""
        with self._lock:
            idle = self._idle.pop(worker_id, [])
        for conn in idle:
            self._discard(conn)

    def sweep(self) -> None:
        """Close the idle connections idle for ``idle_seconds`` or more, and
        those the worker closed or said it drains on (one poll for all);
        report a draining worker to ``on_draining``."""
        with self._lock:
            idle = [conn for conns in self._idle.values() for conn in conns]
        if not idle:
            return
        poller = select.poll()
        for conn in idle:
            poller.register(conn.sock.fileno(), POLL_CLOSED)
        readable = {fd for fd, _ in poller.poll(0)}
        now = time.monotonic()
        for conn in idle:
            heard = conn.sock.fileno() in readable
            if not heard and now - conn.used < self.idle_seconds:
                continue
            with self._lock:
                conns = self._idle.get(conn.worker.id, [])
                if conn not in conns:
                    continue  # a request took it meanwhile (and checks it itself)
                conns.remove(conn)
            if heard and conn.said_draining():
                self.on_draining(conn.worker.id)
            self._discard(conn)
