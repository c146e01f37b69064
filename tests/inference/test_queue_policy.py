"""The dynamic batcher's priority levels and queue policies, in the model
runner with real ONNX Runtime sessions (expected values from numpy).

Requests are held in the queue by the batching window (wall-clock time), not
by a busy model, so the orders asserted do not depend on the machine's speed:
with ``max_batch_size`` 4, a request of 4 rows is a full batch and runs as
soon as it is served first, while requests of one row wait for the window.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import onnxruntime as ort
import pytest

from inference.protocol.errors import ModelNotReady, QueueFull
from inference.runtime.execution import BatchingPolicy, RunTarget
from inference.runtime.onnx import OnnxModel
from inference.runtime.queue_policy import PriorityLevels, QueuePolicy, Schedule
from inference.runtime.runner import ModelRunner
from tests.support import onnx_models as m
from tests.support.live import in_time

AFFINE = m.affine(2.0, 1.0)  # y = 2x + 1, x: FP32 [N, 4]
SLOW = m.slow_loop()  # no batch dimension: max_batch_size 0
WINDOW_US = 1_000_000


def _runner() -> ModelRunner:
    sessions = {"affine": AFFINE, "slow": SLOW}
    return ModelRunner(
        lambda t: OnnxModel(ort.InferenceSession(sessions[t.artifact], providers=["CPUExecutionProvider"]))
    )


def _target(levels: PriorityLevels, artifact: str = "affine", max_batch: int = 4, **batching) -> RunTarget:
    batching.setdefault("max_queue_delay_us", WINDOW_US)
    preferred = (max_batch,) if max_batch else ()
    policy = BatchingPolicy(max_batch, preferred_batch_sizes=preferred, levels=levels, **batching)
    return RunTarget(artifact, 1, f"sha-{artifact}", artifact, 100, batching=policy)


class Calls:
    """Requests sent from threads: each one's result or error, and the order they finished in."""

    def __init__(self, runner: ModelRunner, target: RunTarget):
        self.runner, self.target = runner, target
        self.results: dict = {}
        self.finished: list[str] = []
        self.times: dict[str, tuple[float, float]] = {}  # name -> (sent, answered), time.monotonic()
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def send(self, name: str, x: np.ndarray, schedule: Schedule | None = None, pause: float = 0.1, **feeds) -> None:
        def call():
            sent = time.monotonic()
            try:
                result = self.runner.run(self.target, {"x": x, **feeds}, ["y"], x.shape[0], None, None, schedule)
            except Exception as exc:
                result = exc
            with self._lock:
                self.results[name] = result
                self.finished.append(name)
                self.times[name] = (sent, time.monotonic())

        thread = threading.Thread(target=call)
        thread.start()
        self.threads.append(thread)
        time.sleep(pause)  # it reaches the queue before the next

    def join(self) -> dict:
        for thread in self.threads:
            thread.join(30)
        return self.results


def _rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32)


def _warm(runner: ModelRunner, target: RunTarget) -> None:
    x = _rows(4, 99)
    np.testing.assert_allclose(runner.run(target, {"x": x}, ["y"], 4).outputs[0], 2 * x + 1, rtol=1e-6)


@pytest.mark.parametrize("priority", [1, 0])
def test_a_higher_priority_request_sent_later_is_served_first(priority):
    """Two one-row requests at level 2 wait for the window; a full batch sent
    after them at level 1 runs at once. At the default level (priority 0: 2)
    it waits behind them, as in one queue."""
    runner = _runner()
    target = _target(PriorityLevels(2, 2))
    _warm(runner, target)

    def scenario() -> bool:
        calls = Calls(runner, target)
        low = [_rows(1, 1), _rows(1, 2)]
        high = _rows(4, 3)
        calls.send("low1", low[0], Schedule(2))
        calls.send("low2", low[1], Schedule(2))
        calls.send("high", high, Schedule(priority), pause=0)
        results = calls.join()
        for name, x in (("low1", low[0]), ("low2", low[1]), ("high", high)):
            np.testing.assert_allclose(results[name].outputs[0], 2 * x + 1, rtol=1e-6)
        window_end = calls.times["low1"][0] + WINDOW_US / 1e6
        if calls.times["high"][0] > window_end - 0.4:
            return False
        assert (results["low1"].batch_size, results["low2"].batch_size) == (2, 2)  # batched together
        if priority == 1:  # served first: at once
            assert calls.finished[0] == "high" and calls.times["high"][1] < window_end - 0.3, calls.times
        else:  # behind the low ones: after their window
            assert calls.times["high"][1] >= window_end, calls.times
        return True

    in_time(scenario)


def test_a_full_queue_refuses_at_once_and_each_level_counts_its_own():
    """Level 1 holds one request, level 2 (the default policy) two: the next
    of each is refused at once (Triton's text); the others run."""
    runner = _runner()
    target = _target(PriorityLevels(2, 2, QueuePolicy(max_size=2), ((1, QueuePolicy(max_size=1)),)))
    _warm(runner, target)
    calls = Calls(runner, target)
    xs = {name: _rows(1, seed) for seed, name in enumerate(("a", "b", "c", "d", "e"))}
    calls.send("a", xs["a"], Schedule(2))
    calls.send("b", xs["b"])  # priority 0: the default level, 2
    calls.send("c", xs["c"], Schedule(1))
    started = time.monotonic()
    with pytest.raises(QueueFull) as full2:
        runner.run(target, {"x": xs["d"]}, ["y"], 1, None, None, Schedule(2))
    with pytest.raises(QueueFull) as full1:
        runner.run(target, {"x": xs["e"]}, ["y"], 1, None, None, Schedule(1))
    assert time.monotonic() - started < 0.5 * WINDOW_US / 1e6  # at once, not after the window
    assert str(full2.value).startswith("Exceeds maximum queue size") and "priority level 2" in str(full2.value)
    assert "max_queue_size of 1" in str(full1.value)
    results = calls.join()
    for name in ("a", "b", "c"):
        np.testing.assert_allclose(results[name].outputs[0], 2 * xs[name] + 1, rtol=1e-6)
    # the queues emptied: they take requests again
    again = runner.run(target, {"x": _rows(4, 7)}, ["y"], 4, None, None, Schedule(1))
    np.testing.assert_allclose(again.outputs[0], 2 * _rows(4, 7) + 1, rtol=1e-6)


def test_reject_refuses_a_request_when_its_queue_timeout_passes_and_it_never_runs():
    """Level 2: REJECT after 200 ms; a request there is refused then, before
    the window ends; the level-1 request beside it runs alone after the window."""
    reject = QueuePolicy(timeout_us=200_000)
    runner = _runner()
    target = _target(PriorityLevels(2, 1, QueuePolicy(), ((2, reject),)))
    _warm(runner, target)
    calls = Calls(runner, target)
    late, kept = _rows(1, 1), _rows(1, 2)
    started = time.monotonic()
    calls.send("late", late, Schedule(2), pause=0)
    calls.send("kept", kept, Schedule(1), pause=0)
    results = calls.join()
    assert isinstance(results["late"], ModelNotReady) and str(results["late"]).startswith("Request timeout expired")
    assert calls.finished[0] == "late"
    np.testing.assert_allclose(results["kept"].outputs[0], 2 * kept + 1, rtol=1e-6)
    assert results["kept"].batch_size == 1  # the refused request did not ride along
    assert time.monotonic() - started >= WINDOW_US / 1e6


def test_a_request_may_only_shorten_its_queue_timeout_where_the_policy_allows():
    """Default 10 s with override: a request asking 200 ms is refused then;
    one asking 60 s keeps the 10 s (and runs after the window). Without
    override the request's timeout is not its queue timeout."""
    runner = _runner()
    allowed = QueuePolicy(timeout_us=10_000_000, allow_override=True)
    target = _target(PriorityLevels(2, 1, allowed, ((2, QueuePolicy(timeout_us=10_000_000)),)))
    _warm(runner, target)
    calls = Calls(runner, target)
    xs = [_rows(1, 1), _rows(1, 2), _rows(1, 3)]
    calls.send("short", xs[0], Schedule(1, 200_000), pause=0)
    calls.send("long", xs[1], Schedule(1, 60_000_000), pause=0)
    calls.send("fixed", xs[2], Schedule(2, 200_000), pause=0)
    results = calls.join()
    assert isinstance(results["short"], ModelNotReady) and "Request timeout expired" in str(results["short"])
    for name, x in (("long", xs[1]), ("fixed", xs[2])):
        np.testing.assert_allclose(results[name].outputs[0], 2 * x + 1, rtol=1e-6)


def test_delay_serves_a_timed_out_request_after_the_others_of_its_level():
    """DELAY: a one-row request whose 100 ms queue timeout passed goes behind
    a full batch sent later, which runs at once; without its timeout passing
    the full batch waits behind it (the window)."""
    runner = _runner()
    target = _target(PriorityLevels(0, 0, QueuePolicy(delay=True, timeout_us=10_000_000, allow_override=True)))
    _warm(runner, target)
    for timeout_us in (100_000, 0):

        def scenario(timeout_us=timeout_us) -> bool:
            calls = Calls(runner, target)
            one, full = _rows(1, 1), _rows(4, 2)
            calls.send("delayed", one, Schedule(0, timeout_us), pause=0.3)
            calls.send("full", full, pause=0)
            results = calls.join()
            np.testing.assert_allclose(results["delayed"].outputs[0], 2 * one + 1, rtol=1e-6)
            np.testing.assert_allclose(results["full"].outputs[0], 2 * full + 1, rtol=1e-6)
            window_end = calls.times["delayed"][0] + WINDOW_US / 1e6
            if calls.times["full"][0] > window_end - 0.4:
                return False
            assert calls.times["delayed"][1] >= window_end  # a one-row request waits out its window either way
            if timeout_us:  # delayed: the full batch went first, at once
                assert calls.finished[0] == "full" and calls.times["full"][1] < window_end - 0.3, calls.times
            else:  # not timed out: the full batch waited behind it
                assert calls.times["full"][1] >= window_end, calls.times
            return True

        in_time(scenario)


def test_preserve_ordering_answers_refused_requests_at_once_and_keeps_the_others_in_order():
    """With preserve_ordering, a request refused by its queue timeout answers
    when it times out (not after the earlier request's answer), and neither
    it nor one refused for a full queue holds the later answers back (a
    refused request that took a place in the order would stall them)."""
    runner = _runner()
    policy = QueuePolicy(timeout_us=10_000_000, allow_override=True, max_size=2)
    target = _target(PriorityLevels(0, 0, policy), preserve_ordering=True)
    _warm(runner, target)
    calls = Calls(runner, target)
    xs = [_rows(1, 1), _rows(1, 2), _rows(1, 3)]
    calls.send("first", xs[0], pause=0.05)
    calls.send("refused", xs[1], Schedule(0, 100_000), pause=0.05)
    with pytest.raises(QueueFull):
        runner.run(target, {"x": xs[2]}, ["y"], 1)
    time.sleep(0.2)  # "refused" was refused: room again
    calls.send("last", xs[2], pause=0)
    results = calls.join()
    assert calls.finished[0] == "refused" and isinstance(results["refused"], ModelNotReady)
    np.testing.assert_allclose(results["first"].outputs[0], 2 * xs[0] + 1, rtol=1e-6)
    np.testing.assert_allclose(results["last"].outputs[0], 2 * xs[2] + 1, rtol=1e-6)
    refused_at = calls.times["refused"][1] - calls.times["refused"][0]
    assert refused_at < 0.5 * WINDOW_US / 1e6  # answered when its timeout passed, not held for "first"
    assert sorted(calls.finished[1:]) == ["first", "last"]  # neither is held back by the refused ones


def test_a_model_without_a_batch_dimension_queues_by_priority_one_request_at_a_time():
    """max_batch_size 0 (Triton's dynamic batcher runs such a model one
    request at a time): while the one instance is busy, a level-1 request
    runs before the level-2 request queued before it, and a level holds no
    more than its max_queue_size."""
    runner = _runner()
    levels = PriorityLevels(2, 2, QueuePolicy(max_size=1))
    target = _target(levels, artifact="slow", max_batch=0)
    x = np.random.default_rng(0).standard_normal((1, 256)).astype(np.float32)
    runner.run(target, {"x": x, "n": np.array(1, dtype=np.int64)}, ["y"], 1)  # load
    calls = Calls(runner, target)
    calls.send("busy", x, Schedule(2), pause=0.05, n=np.array(60_000, dtype=np.int64))  # holds the instance a while
    calls.send("low", x, Schedule(2), pause=0.02, n=np.array(5_000, dtype=np.int64))
    calls.send("high", 2 * x, Schedule(1), pause=0, n=np.array(5_000, dtype=np.int64))
    with pytest.raises(QueueFull):
        runner.run(target, {"x": x, "n": np.array(1, dtype=np.int64)}, ["y"], 1, None, None, Schedule(2))
    results = calls.join()
    if calls.times["busy"][1] < calls.times["high"][0] + 0.01 or results["busy"].queue_ns > 0.04e9:
        pytest.skip(f"the busy request did not hold the instance while the others queued: {calls.times}")
    assert calls.finished == ["busy", "high", "low"]  # each runs a while: their ends are apart
    np.testing.assert_allclose(results["low"].outputs[0], m.slow_loop_expected(x, 5_000), atol=1e-6)
    np.testing.assert_allclose(results["high"].outputs[0], m.slow_loop_expected(2 * x, 5_000), atol=1e-6)
    assert all(results[name].batch_size == 1 for name in ("busy", "low", "high"))


def test_the_fair_share_gate_leaves_a_model_with_levels_or_policies_to_its_queues():
    """A model with priority levels or a queue policy is not gated by
    inference/admission/fair_share.py (0 seats): its requests reach the batcher's
    queues, whose priorities, max_queue_size and timeouts decide, as in
    Triton; without them the gate holds what does not run (4 rows x 2)."""

    def seats(levels: PriorityLevels) -> int:
        batching = BatchingPolicy(4, levels=levels)
        return RunTarget("affine", 1, "sha", "affine", 100, instances=2, batching=batching).seats

    assert seats(PriorityLevels()) == 8
    assert seats(PriorityLevels(0, 0, QueuePolicy(max_size=5))) == 0
    assert seats(PriorityLevels(2, 1)) == 0


def test_requests_naming_many_levels_leave_no_queues_behind():
    """Levels without a policy of their own get a queue while they hold a
    request and lose it when it empties (as Triton erases them): a client
    sending every priority of 2**64 - 1 levels costs nothing once answered."""
    runner = _runner()
    target = _target(PriorityLevels(2**64 - 1, 1), max_queue_delay_us=0)
    x = _rows(4, 5)
    for priority in (1, 2, 3, 1000, 2**63, 2**64 - 1, 2**64):
        result = runner.run(target, {"x": x}, ["y"], 4, None, None, Schedule(priority))
        np.testing.assert_allclose(result.outputs[0], 2 * x + 1, rtol=1e-6)
    queue = runner._loaded[target.key].batcher._queue
    assert list(queue._queues) == [1]  # the default level only
