"""An inference worker's heartbeat in Redis, and how it is asked to drain.

A worker (``manage.py runworker``) keeps the key
``modelhost:worker:<queue>:<worker id>`` alive (:class:`Heartbeat`: every
``HEARTBEAT_SECONDS``, expiring after ``HEARTBEAT_TTL_MS``); its value is
the worker's :class:`~inference.workers.messages.Announcement`, which front
ends read (:class:`~inference.workers.placement.WorkerDirectory`).
``manage.py drainworker <id>`` sets ``modelhost:worker-drain:<id>``
(:func:`drain_key`), which the worker reads with each beat (the same round
trip): it then drains and stops as on SIGTERM.
"""

from __future__ import annotations

import logging
import threading

from inference.observability.outage import DependencyWatch
from inference.workers import messages
from inference.workers.placement import HEARTBEAT_SECONDS, HEARTBEAT_TTL_MS, heartbeat_key

logger = logging.getLogger(__name__)

#: A worker asked to drain finds this key (+ its id) at its next beat.
DRAIN_PREFIX = "modelhost:worker-drain:"
#: How long a drain request waits for its worker to read it.
DRAIN_REQUEST_TTL_MS = 60_000


def drain_key(worker_id: str) -> str:
    """The Redis key that asks the worker ``worker_id`` to drain and stop."""
    return f"{DRAIN_PREFIX}{worker_id}"


class Heartbeat:
    """Keeps this worker's heartbeat key alive from a daemon thread; the key's
    value (JSON) is ``announcement()``, a :class:`messages.Announcement`.
    Each beat also reads whether the worker was asked to drain
    (:func:`drain_key`): then ``on_drain()`` is called (once)."""

    def __init__(self, redis_client, queue: str, worker_id: str, announcement, on_drain=lambda: None):
        self.redis = redis_client
        self.key = heartbeat_key(queue, worker_id)
        self.drain_key = drain_key(worker_id)
        self.announcement = announcement
        self.on_drain = on_drain
        self._asked = False
        self._stop = threading.Event()
        self._lock = threading.Lock()  # a beat's value is written in the order it was made
        self.redis_watch = DependencyWatch("Redis (this worker's heartbeat)", logger)

    def beat(self) -> None:
        """Write the heartbeat now (one round trip, with the drain request's read)."""
        with self._lock:
            pipe = self.redis.pipeline(transaction=False)
            pipe.set(self.key, messages.encode_json(self.announcement()), px=HEARTBEAT_TTL_MS)
            pipe.get(self.drain_key)
            asked = pipe.execute()[1] is not None
        if asked and not self._asked:
            self._asked = True
            logger.warning("asked to drain (%s): draining, then stopping", self.drain_key)
            self.on_drain()

    def start(self) -> None:
        self.beat()
        threading.Thread(target=self._run, name="heartbeat", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        try:
            with self._lock:
                self.redis.delete(self.key, self.drain_key)
        except Exception:
            pass

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            try:
                self.beat()
            except Exception as exc:
                self.redis_watch.failed(
                    exc,
                    f"front ends drop this worker once its heartbeat expires; retrying every {HEARTBEAT_SECONDS:g} s",
                )
            else:
                self.redis_watch.ok()
