"""The timer that judges rollouts' steps (:func:`models_store.rollouts.services.tick`)
every ROLLOUT_TICK_SECONDS, a daemon thread of ``serve``. Several
processes (replicas) may run it at once: each step is judged by one of them
(the row lock and the claim of :mod:`models_store.rollouts.services`). A
database that is down skips the round (one log line)."""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import close_old_connections

from inference.outage import DependencyWatch
from models_store import outages
from models_store.rollouts import services

logger = logging.getLogger(__name__)


class RolloutTicker:
    """A daemon thread running :func:`services.tick` every ``interval`` seconds."""

    def __init__(self, interval: float):
        self.interval = interval
        self.watch = DependencyWatch("the model store (rollouts)", logger)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> RolloutTicker:
        if self.interval > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="rollout-ticker", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                for rollout, outcome in services.tick():
                    logger.info("rollout %s: %s", rollout, outcome)
            except Exception as exc:
                if outages.transient(exc):
                    self.watch.failed(exc, f"rollouts are judged again in {self.interval:g} s")
                else:
                    logger.exception("judging the rollouts failed")
            else:
                self.watch.ok()
            finally:
                close_old_connections()


def start() -> RolloutTicker:
    """Start this process's rollout timer (ROLLOUT_TICK_SECONDS; 0: none)."""
    return RolloutTicker(settings.ROLLOUT_TICK_SECONDS).start()
