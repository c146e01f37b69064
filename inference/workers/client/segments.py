"""Worker mode, front-end side: consecutive steps of an ensemble sent to one
worker as one :class:`~inference.workers.messages.SegmentRequest`
(inference/ensembles/segments.py decides which steps), so that the tensors
between them never cross the link.

A part of :class:`~inference.workers.client.executor.RemoteExecutor` (its
connections, round robin and faults: a segment is one request like any
other, answered once, sent once more only when no byte of its answer came).
"""

from __future__ import annotations

import time

import numpy as np

from inference.observability import tracing
from inference.protocol import errors
from inference.workers import messages
from inference.workers.client.answers import SegmentRun, segment_result
from inference.workers.placement import Worker


class SegmentRuns:
    """Segments on workers; mixed into RemoteExecutor (its ``directory``,
    ``default_timeout``, ``_drive``, ``_order`` and ``_exchange``)."""

    def segment_workers(self, placements: list) -> list[Worker]:
        """The live workers that serve a device every instance group of
        ``placements`` allows (in the first's device order)."""
        if not placements:
            return []
        shared = None
        for placement in placements:
            ids = {worker.id for worker in self.directory.candidates(placement)}
            shared = ids if shared is None else shared & ids
        return [worker for worker in self.directory.candidates(placements[0]) if worker.id in shared]

    def run_segment(
        self, steps: list, feeds: dict[str, np.ndarray], returns: list[str], deadline: float | None, placements: list
    ) -> SegmentRun:
        """Run ``steps`` ((RunTarget, input map, output map) each: the step
        model's names -> segment tensors) in order on one worker that serves
        every instance group of ``placements``, on ``feeds`` (segment tensors
        by name); the answer holds the ``returns`` tensors. ``deadline``:
        ``time.monotonic()``, for every step (None: the default timeout).
        A step's failure is the SegmentRun's ``error``; raises ModelNotReady
        (no such worker, the worker lost), DeadlineExceeded (no answer in
        time) and the errors the worker reports for the whole request."""
        return self._drive(self._segment_steps(steps, feeds, returns, deadline, placements))

    def _segment_steps(self, steps, feeds, returns, deadline, placements):
        """The segment's request, as a generator of what it needs done
        (RemoteExecutor._do); returns its SegmentRun."""
        workers = self.segment_workers(placements)
        if not workers:
            yield None  # read the heartbeats again
            workers = self.segment_workers(placements)
            if not workers:
                why = self.directory.error or "no live worker serves every step's instance group"
                raise errors.ModelNotReady(f"the steps cannot run together now: {why}")
        if deadline is None:
            deadline = time.monotonic() + self.default_timeout
        request = messages.SegmentRequest(
            [messages.SegmentStep(t.model, t.version, t.sha256, dict(i), dict(o)) for t, i, o in steps],
            list(returns),
            time.time() + (deadline - time.monotonic()),
        )
        if tracing.ENABLED:
            request.traceparent = tracing.traceparent()  # only for a traced request: the worker's spans join it
        order = self._order(tuple(target.key for target, _, _ in steps), workers)
        answer = yield from self._exchange(order, request, feeds, deadline, True)
        return segment_result(*answer, request.returns, len(steps))
