"""How an inference worker stops without failing a request: SIGTERM, or
``manage.py drainworker <id>`` (:mod:`inference.workers.server.heartbeat`).

1. Its server takes no new request
   (:meth:`~inference.workers.server.socket_server.WorkerServer.drain`): a request
   that arrives is not run but answered
   :class:`~inference.workers.messages.Draining`, and the front end sends it
   to another worker; a new connection gets Draining instead of its hello.
2. Its heartbeat says ``draining`` at once: every front end drops it at its
   next read of the heartbeats (every 0.5 s), or sooner when a connection
   tells it.
3. It waits until every request it held (running, or queued for an
   instance or a batch) was answered, at most ``grace`` seconds
   (WORKER_DRAIN_SECONDS).
4. It keeps the draining heartbeat until ``NOTICE_SECONDS`` passed since
   step 2 (two reads of every front end's directory), so that no front end
   still counts on it when it exits; then its key goes and it exits.

The sequences it holds (sequence batching) end with it: their next request
answers UNAVAILABLE naming the lost sequence, as for a stopped worker.
"""

from __future__ import annotations

import logging
import threading
import time

logger = logging.getLogger(__name__)

#: How long a draining worker's heartbeat says so before it exits, at least (s).
NOTICE_SECONDS = 1.0


class Drain:
    """Drains ``server`` (a WorkerServer) and marks ``heartbeat`` (a
    Heartbeat whose announcement reads ``server.draining``), once, in a
    thread of its own (:meth:`start`, from a signal handler too)."""

    def __init__(self, server, heartbeat, grace: float):
        self.server = server
        self.heartbeat = heartbeat
        self.grace = grace
        self._started = False
        self._lock = threading.Lock()
        self._done = threading.Event()

    def start(self) -> None:
        """Begin draining (again: nothing)."""
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._run, name="worker-drain", daemon=True).start()

    def wait(self) -> None:
        """Until the drain is over (started first if it was not)."""
        self.start()
        while not self._done.wait(0.5):  # in slices: the main thread stays responsive to signals
            pass

    @property
    def over(self) -> bool:
        return self._done.is_set()

    def _run(self) -> None:
        began = time.monotonic()
        try:
            self.server.drain()
            try:
                self.heartbeat.beat()
            except Exception as exc:  # Redis down: connections still tell every front end that sends
                logger.warning("draining: the heartbeat could not say so (%s)", exc)
            held = self.server.busy
            logger.warning("draining: no new request is taken; %d held, waiting up to %g s", held, self.grace)
            if self.server.wait_drained(self.grace):
                logger.warning("drained: every request it held was answered (%d served since start)",
                               self.server.served)  # fmt: skip
            else:
                logger.warning("drain grace (%g s) over with %d request(s) unanswered", self.grace, self.server.busy)
            time.sleep(max(0.0, NOTICE_SECONDS - (time.monotonic() - began)))
        finally:
            self._done.set()
