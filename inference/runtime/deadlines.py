"""Request deadlines of running inferences.

One daemon thread per process keeps a heap of running inferences with a
deadline; when one passes, it sets that run's ONNX Runtime
``RunOptions.terminate`` so the session stops, and the runner reports
DEADLINE_EXCEEDED. Inferences without a deadline never touch it.

Cheap per run (worker mode gives every request a deadline): :meth:`watch`
wakes the thread only when the new deadline comes before the time it wakes
up anyway, and finished runs leave the heap in a batch once they make up
most of it, so it stays about as small as the number of runs in progress.
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
        self._wake_at = float("inf")  # when the thread wakes up on its own

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
            if deadline < self._wake_at:  # the thread must wake up sooner than it would
                self._wake_at = deadline
                self._cond.notify()
        return token

    def done(self, token: int) -> None:
        with self._cond:
            self._active.discard(token)
            if len(self._heap) > 64 and len(self._heap) > 4 * len(self._active):
                self._heap = [item for item in self._heap if item[1] in self._active]
                heapq.heapify(self._heap)

    def _run(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][1] not in self._active:
                    heapq.heappop(self._heap)  # finished in time
                if not self._heap:
                    self._wake_at = float("inf")
                    self._cond.wait()
                    continue
                deadline, token, run_options = self._heap[0]
                delay = deadline - time.monotonic()
                if delay > 0:
                    self._wake_at = deadline
                    self._cond.wait(delay)
                    continue
                heapq.heappop(self._heap)
                if token in self._active:
                    run_options.terminate = True


watchdog = Watchdog()
