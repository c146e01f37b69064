"""A worker's shadow lane (inference/workers/server/runtime.py): a shadow
copy (``RunRequest.shadow``) runs only while the worker handles no other
request, waiting for that at most SHADOW_WAIT_SECONDS, else it is answered
QUEUE_FULL unrun (the front end counts it ``busy``); live requests never
wait for a copy. The runner here is a stand-in whose live runs wait for the
test (the ONNX Runtime paths are the live tests': tests/interop/test_shadow_traffic.py)."""

from __future__ import annotations

import socket
import threading
import time
import types

import numpy as np

from inference.runtime.execution import RunResult, RunTarget
from inference.workers import frames, messages
from inference.workers.server import runtime as worker_runtime
from inference.workers.server.runtime import WorkerRuntime


class HeldRunner:
    """Runs y = 2x; a run of an input whose first element is negative (a live request here) waits for
    ``release``. Records the inputs it ran."""

    drain_seconds = 0.0

    def __init__(self):
        self.release = threading.Event()
        self.holding = threading.Event()
        self.ran: list[float] = []

    def run(self, target, feeds, names, rows=1, deadline=None, sequence=None, schedule=None):
        x = feeds["x"]
        if x.flat[0] < 0:
            self.holding.set()
            assert self.release.wait(10)
        self.ran.append(float(x.flat[0]))
        return RunResult([x * 2], rows, True, 0, 0)


def _runtime() -> tuple[WorkerRuntime, HeldRunner]:
    runner = HeldRunner()
    runtime = WorkerRuntime("cpu", runner, types.SimpleNamespace(models={}, catch_up=lambda: False))
    target = RunTarget("m", 1, "s", "a", size=1)
    runtime._targets[target.key] = target  # as on_snapshot sets it for a serving version
    return runtime, runner


def _ask(runtime: WorkerRuntime, value: float, shadow: bool):
    """Handle a request of x = [[value, 1]] as a worker does; the decoded answer and its tensors."""
    request = messages.RunRequest("m", 1, "s", ["y"], 1, time.time() + 10, shadow=shadow)
    x = np.array([[value, 1.0]], np.float32)
    sent, got = socket.socketpair()
    with sent, got:
        frames.send(sent, frames.encode(request, [("x", x)]))
        request, body = frames.Reader(got, 1 << 20, messages.to_worker).frame()
        frames.send(got, runtime.handle(request, body))
        answer, body = frames.Reader(sent, 1 << 20, messages.to_front_end).frame()
    return answer, (frames.tensors(answer, body) if isinstance(answer, messages.RunAnswer) else {})


def test_a_shadow_copy_runs_on_an_idle_worker():
    runtime, runner = _runtime()
    answer, tensors = _ask(runtime, 3.0, shadow=True)
    assert isinstance(answer, messages.RunAnswer)
    np.testing.assert_array_equal(tensors["y"], np.array([[6.0, 2.0]], np.float32))
    assert runner.ran == [3.0]


def test_a_shadow_copy_waits_for_the_live_request_then_runs():
    runtime, runner = _runtime()
    live = threading.Thread(target=_ask, args=(runtime, -1.0, False))
    live.start()
    assert runner.holding.wait(5)
    started = time.monotonic()  # before the timer starts: the release comes at least its interval later
    threading.Timer(worker_runtime.SHADOW_WAIT_SECONDS / 5, runner.release.set).start()
    answer, tensors = _ask(runtime, 3.0, shadow=True)
    waited = time.monotonic() - started
    live.join(5)
    assert isinstance(answer, messages.RunAnswer), answer
    np.testing.assert_array_equal(tensors["y"], np.array([[6.0, 2.0]], np.float32))
    assert runner.ran == [-1.0, 3.0]  # after the live request, never beside it
    assert worker_runtime.SHADOW_WAIT_SECONDS / 5 <= waited < 2.0


def test_a_shadow_copy_is_refused_while_live_requests_keep_the_worker_busy():
    runtime, runner = _runtime()
    live = threading.Thread(target=_ask, args=(runtime, -1.0, False))
    live.start()
    assert runner.holding.wait(5)
    started = time.monotonic()
    answer, _ = _ask(runtime, 3.0, shadow=True)
    waited = time.monotonic() - started
    runner.release.set()
    live.join(5)
    assert isinstance(answer, messages.ErrorAnswer) and answer.code == "QUEUE_FULL", answer
    assert worker_runtime.SHADOW_WAIT_SECONDS <= waited < 1.0
    assert runner.ran == [-1.0]  # the copy never ran
    answer, _ = _ask(runtime, 4.0, shadow=False)  # a live request is answered as ever
    assert isinstance(answer, messages.RunAnswer) and runner.ran == [-1.0, 4.0]
