"""Request deadlines for in-process inference.

One daemon thread per process keeps a heap of running inferences with a
deadline; when one passes, it sets that run's ONNX Runtime
``RunOptions.terminate`` so the session stops, and the executor reports
DEADLINE_EXCEEDED. Inferences without a deadline never touch it.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time


class Watchdog:
    def __init__(self):
        self._heap: list[tuple[float, int, object]] = []
        self._active: set[int] = set()
        self._counter = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, deadline: float, run_options) -> int:
        """Terminate ``run_options`` at ``deadline`` (time.monotonic()) unless
        :meth:`done` is called first; returns the token for done()."""
        token = next(self._counter)
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="deadline-watchdog", daemon=True)
                self._thread.start()
            self._active.add(token)
            heapq.heappush(self._heap, (deadline, token, run_options))
            self._cond.notify()
        return token

    def done(self, token: int) -> None:
        with self._cond:
            self._active.discard(token)

    def _run(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][1] not in self._active:
                    heapq.heappop(self._heap)  # finished in time
                if not self._heap:
                    self._cond.wait()
                    continue
                deadline, token, run_options = self._heap[0]
                delay = deadline - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                heapq.heappop(self._heap)
                if token in self._active:
                    run_options.terminate = True


watchdog = Watchdog()
