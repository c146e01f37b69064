"""Worker mode: which worker holds each sequence (sequence batching).

A sequence's state lives in the worker that ran its first request, so every
request of the sequence must go to that worker. Each front-end process
sends a sequence's START to the worker that rendezvous hashing picks among
the live workers of the model's devices (the same pick in every front-end
process of every machine while they see the same workers), remembers the
pick once that worker has answered the request (:meth:`SequenceRoutes.answered`:
nothing is kept for a request a worker refused or never got), and sends
the sequence's later requests there: to the remembered worker, or, for a
sequence another front-end process started, to the worker the hash picks.

If the worker holding a sequence goes away (killed, its heartbeat expired,
it refuses connections), the sequence's next request is refused with an
error naming the lost sequence; it is never sent to another worker, where
it would silently continue from a fresh state. A request of a sequence
started elsewhere and lost with its worker reaches a worker that does not
hold it and gets Triton's "must specify the START flag" error: never a
silent restart either.
"""

from __future__ import annotations

import hashlib
import threading
import time

from inference.protocol import errors
from inference.runtime.execution import RunTarget
from inference.runtime.sequences.policy import SequenceRequest
from inference.workers.placement import Worker

#: How often remembered routes are checked for expiry, at most.
_PRUNE_SECONDS = 5.0


def _score(key: tuple, worker_id: str) -> int:
    digest = hashlib.blake2b(repr((key, worker_id)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class SequenceRoutes:
    """The workers of the sequences this front-end process sent (thread-safe).
    A route is forgotten at its sequence's END, or after twice the model's
    ``max_sequence_idle_microseconds`` without a request (the worker has
    released the sequence by then)."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._routes: dict[tuple, tuple[str, str, float]] = {}  # key -> (worker id, its queue, expiry)
        self._pruned = clock()

    @staticmethod
    def _key(target: RunTarget, sequence: SequenceRequest) -> tuple:
        return (target.model, target.version, target.sha256, sequence.owner, type(sequence.corrid).__name__,
                sequence.corrid)  # fmt: skip

    def order(self, target: RunTarget, sequence: SequenceRequest, workers: list[Worker]) -> list[Worker]:
        """The worker to send this request of ``sequence`` to (a list of
        one: it is never sent elsewhere; empty when ``workers`` is and no
        worker holds it). Raises ModelNotReady naming the sequence when the
        worker holding it is not live."""
        key = self._key(target, sequence)
        now = self._clock()
        keep = 2 * target.sequence.idle_us / 1e6 + 1.0
        with self._lock:
            if now - self._pruned > _PRUNE_SECONDS:
                self._routes = {k: v for k, v in self._routes.items() if v[2] > now}
                self._pruned = now
            held = None if sequence.start else self._routes.get(key)
            if held is not None and held[2] > now:
                live = [w for w in workers if w.id == held[0]]
                if not live:
                    raise self._lost(target, sequence, held[1], held[0], "stopped (its heartbeat is gone)")
                self._routes[key] = (held[0], held[1], now + keep)
                return live
            if not workers:
                return []
            return [max(workers, key=lambda w: _score(key, w.id))]

    def answered(self, target: RunTarget, sequence: SequenceRequest, worker: Worker) -> None:
        """``worker`` answered this request of ``sequence``: it holds the
        sequence (remembered, unless the request ended it)."""
        if sequence.end:
            return
        keep = 2 * target.sequence.idle_us / 1e6 + 1.0
        with self._lock:
            self._routes[self._key(target, sequence)] = (worker.id, worker.queue, self._clock() + keep)

    def failed(self, target: RunTarget, sequence: SequenceRequest, worker: Worker, exc: errors.ModelNotReady):
        """The error to answer when the worker holding the sequence could not
        be reached or died holding the request: for a request continuing
        the sequence, one naming the lost sequence."""
        if sequence.start:
            return exc
        return self._lost(target, sequence, worker.queue, worker.id, f"failed: {exc.message}")

    def forget(self, target: RunTarget, sequence: SequenceRequest) -> None:
        """The sequence ended: its ID is free for a new sequence."""
        with self._lock:
            self._routes.pop(self._key(target, sequence), None)

    @staticmethod
    def _lost(target: RunTarget, sequence: SequenceRequest, queue: str, worker_id: str, why: str):
        return errors.ModelNotReady(
            f"sequence {sequence.describe()} of model '{target.model}' was lost: the {queue} worker {worker_id} "
            f"that held its state {why}; start the sequence again (sequence_start)"
        )

    def __len__(self) -> int:
        with self._lock:
            return len(self._routes)
