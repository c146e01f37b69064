"""The model runner: instances, the memory budget, deadlines, dynamic batching
(real ONNX Runtime sessions of models built in code; expected values from numpy)."""

from __future__ import annotations

import threading
import time

import numpy as np
import onnxruntime as ort
import pytest

from inference.protocol.errors import DeadlineExceeded, InvalidInput, ModelNotReady
from inference.runtime.execution import BatchingPolicy, RunTarget
from inference.runtime.onnx import OnnxModel
from inference.runtime.runner import ModelRunner
from tests.support import onnx_models as m

AFFINE = m.affine(2.0, 1.0)  # y = 2x + 1, x: FP32 [N, 4]
GATHER = m.gather_table()
TABLE = np.array([0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5], dtype=np.float32)
SLOW = m.slow_loop()


class Loader:
    """Builds sessions from in-memory model bytes (the artifact is a key of ``models``) and counts them."""

    def __init__(self, **models: bytes):
        self.models = models
        self.loads: list[str] = []

    def __call__(self, target: RunTarget) -> OnnxModel:
        self.loads.append(target.artifact)
        if target.artifact not in self.models:
            raise FileNotFoundError(target.artifact)
        return OnnxModel(ort.InferenceSession(self.models[target.artifact], providers=["CPUExecutionProvider"]))


def target(artifact: str, size: int = 100, version: int = 1, **kwargs) -> RunTarget:
    return RunTarget(artifact, version, f"sha-{artifact}", artifact, size, **kwargs)


def test_runs_and_loads_each_version_once_with_its_instances():
    loader = Loader(affine=AFFINE)
    runner = ModelRunner(loader)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    for _ in range(3):
        result = runner.run(target("affine", instances=3), {"x": x}, ["y"], rows=2)
        np.testing.assert_allclose(result.outputs[0], 2 * x + 1)
        assert (result.batch_size, result.executed) == (2, True) and result.infer_ns > 0
    assert loader.loads == ["affine"] * 3  # three instances, loaded once


class Timed(OnnxModel):
    """An OnnxModel that records each run's (start, end) on perf_counter and
    sets ``running`` when a run begins."""

    def __init__(self, session):
        super().__init__(session)
        self.spans: list[tuple[float, float]] = []
        self.running = threading.Event()

    def run(self, feeds, output_names, run_options=None):
        started = time.perf_counter()
        self.running.set()
        try:
            return super().run(feeds, output_names, run_options)
        finally:
            self.spans.append((started, time.perf_counter()))


def test_instances_bound_concurrent_runs():
    """With one instance, a request that arrives while another runs waits for
    it: the runs do not overlap, and the second's queue time is counted."""
    model = Timed(ort.InferenceSession(SLOW, providers=["CPUExecutionProvider"]))
    runner = ModelRunner(lambda target_: model)
    feeds = {"x": np.ones((1, 256), dtype=np.float32), "n": np.array(5000, dtype=np.int64)}
    runner.run(target("slow"), feeds, ["y"])  # load and warm up
    model.spans.clear()
    model.running.clear()
    results = {}
    first = threading.Thread(target=lambda: results.update(first=runner.run(target("slow"), feeds, ["y"])))
    first.start()
    assert model.running.wait(30)  # the first holds the one instance
    called = time.perf_counter()
    second = runner.run(target("slow"), feeds, ["y"])
    first.join()
    (_, a_end), (b_start, _) = sorted(model.spans)
    assert a_end <= b_start  # one after the other
    assert second.queue_ns > 0 and second.queue_ns >= 0.9 * (a_end - called) * 1e9  # it waited for the first
    np.testing.assert_array_equal(second.outputs[0], results["first"].outputs[0])


class Memory:
    """A process's memory as the runner reads it: each load of artifact ``a``
    (through :meth:`load`) grows it by ``grows[a]`` bytes, what a session
    takes, so that charges are exact."""

    def __init__(self, loader: Loader, **grows: int):
        self.value = 1_000_000
        self.grows = grows
        self.inner = loader

    def load(self, target_: RunTarget) -> OnnxModel:
        self.value += self.grows.get(target_.artifact, 0)
        return self.inner(target_)

    def __call__(self) -> int:
        return self.value


def _budgeted(budget: int, **grows: int) -> tuple[ModelRunner, Loader, Memory]:
    loader = Loader(**{name: AFFINE for name in grows})
    memory = Memory(loader, **grows)
    return ModelRunner(memory.load, budget_bytes=budget, cost_factor=2.0, memory=memory), loader, memory


X = {"x": np.zeros((1, 4), dtype=np.float32)}


def test_memory_budget_charges_what_a_load_took_and_unloads_the_least_recently_used():
    runner, loader, _ = _budgeted(1000, a=400, b=400, c=400)
    runner.run(target("a", size=50), X, ["y"])  # file 50 B, estimate 100 B: charged the 400 it took
    runner.run(target("b", size=50), X, ["y"])  # 800 in use
    runner.run(target("a", size=50), X, ["y"])  # a is the most recent now
    runner.run(target("c", size=50), X, ["y"])  # 1200 > 1000, and c is asked for as often as b: b stays
    assert loader.loads == ["a", "b", "c"] and runner.used == 800 and runner.counts["transient_loads"] == 1
    assert sorted(t.artifact for t in runner.loaded()) == ["a", "b"]  # c ran transiently: not asked for more than b
    runner.run(target("c", size=50), X, ["y"])  # asked for twice now, b once: c replaces b
    assert sorted(t.artifact for t in runner.loaded()) == ["a", "c"] and runner.used == 800
    assert runner.counts["evictions"] == 1
    runner.retain({target("c", size=50).key})
    assert [t.artifact for t in runner.loaded()] == ["c"]


def test_a_load_that_reuses_freed_memory_is_charged_what_others_took():
    """Memory freed by an unloaded version is reused by the next load, so RSS
    grows by less than it takes: the charge is the measured ratio x size."""
    runner, _, _ = _budgeted(10_000, a=1000, b=0)
    runner.run(target("a", size=100), X, ["y"])  # took 10 x its file size
    runner.run(target("b", size=200), X, ["y"])  # grew nothing (reused)
    assert runner.used == 1000 + 2000


def test_cyclic_access_over_twice_the_budget_keeps_half_loaded():
    """8 versions of 100 B, a budget of 4: least-recently-used alone would
    reload for every request; admission keeps a resident half."""
    names = [f"m{i}" for i in range(8)]
    runner, loader, _ = _budgeted(400, **dict.fromkeys(names, 100))
    for _ in range(10):
        for name in names:
            np.testing.assert_allclose(runner.run(target(name), X, ["y"]).outputs[0], np.ones((1, 4)))
    hits, misses = runner.counts["hits"], runner.counts["misses"]
    assert hits + misses == 80 and hits / 80 >= 0.4, runner.counts
    assert runner.used <= 400 and len(runner.loaded()) == 4
    assert len(loader.loads) == misses and runner.counts["transient_loads"] >= 30


def test_a_version_asked_for_often_displaces_one_asked_for_rarely():
    runner, _, _ = _budgeted(200, hot=100, cold=100, other=100)
    for name in ("cold", "other"):
        runner.run(target(name), X, ["y"])
    for _ in range(3):
        runner.run(target("hot"), X, ["y"])  # transient at first, then more often than the least recent
    assert "hot" in [t.artifact for t in runner.loaded()] and runner.used <= 200
    assert runner.counts["evictions"] >= 1


def test_at_most_one_version_runs_outside_the_budget_at_a_time():
    names = [f"m{i}" for i in range(6)]
    runner, _, memory = _budgeted(200, **dict.fromkeys(names, 100))
    seen = []  # (transient versions, bytes charged) whenever a load starts
    grow = memory.load

    def load(target_):
        seen.append((len(runner._transient), runner.used))
        return grow(target_)

    runner._load = load
    for name in names[:2]:
        runner.run(target(name), X, ["y"])
    threads = [
        threading.Thread(target=lambda n=name: [runner.run(target(n), X, ["y"]) for _ in range(5)]) for name in names
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert runner.counts["transient_loads"] >= 1
    assert max(t for t, _ in seen) <= 1 and max(used for _, used in seen) <= 200, seen
    assert runner.used <= 200 and not runner._transient  # every transient version unloaded after use
    assert runner._transient_slot.acquire(blocking=False)  # and its slot free again
    runner._transient_slot.release()


def test_a_version_that_cannot_load_is_not_ready():
    runner = ModelRunner(Loader())
    with pytest.raises(ModelNotReady, match="version 1 of model 'missing' failed to load"):
        runner.run(target("missing"), {"x": np.zeros((1, 4), dtype=np.float32)}, ["y"])


def test_deadline_passed_while_waiting_for_an_instance_is_not_run():
    runner = ModelRunner(Loader(slow=SLOW))
    busy = {"x": np.ones((1, 256), dtype=np.float32), "n": np.array(400_000, dtype=np.int64)}  # about a second
    runner.run(target("slow"), {**busy, "n": np.array(1, dtype=np.int64)}, ["y"])
    thread = threading.Thread(target=runner.run, args=(target("slow"), busy, ["y"]))
    thread.start()
    time.sleep(0.1)
    with pytest.raises(DeadlineExceeded, match="waited for an instance"):
        runner.run(target("slow"), busy, ["y"], deadline=time.monotonic() + 0.05)
    thread.join()


def test_deadline_stops_a_running_model():
    runner = ModelRunner(Loader(slow=SLOW))
    feeds = {"x": np.ones((1, 256), dtype=np.float32), "n": np.array(10_000_000, dtype=np.int64)}
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded, match="while the model was running"):
        runner.run(target("slow"), feeds, ["y"], deadline=time.monotonic() + 0.3)
    assert time.monotonic() - started < 5


# -- dynamic batching ----------------------------------------------------------
def batching(delay_us: int = 20000, max_batch: int = 8, **kwargs) -> BatchingPolicy:
    return BatchingPolicy(max_batch, max_queue_delay_us=delay_us, **kwargs)


def _concurrently(calls):
    """Run the calls at once from threads; their results (or exceptions) in order."""
    results: list = [None] * len(calls)
    barrier = threading.Barrier(len(calls))

    def one(i, call):
        barrier.wait()
        try:
            results[i] = call()
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_concurrent_requests_run_as_one_batch_and_split_back():
    runner = ModelRunner(Loader(affine=AFFINE))
    spec = target("affine", batching=batching())
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((1, 4)).astype(np.float32) for _ in range(8)]
    results = _concurrently([lambda x=x: runner.run(spec, {"x": x}, ["y"]) for x in xs])
    for x, result in zip(xs, results):
        np.testing.assert_allclose(result.outputs[0], 2 * x + 1, rtol=1e-6)
    executions = sum(r.executed for r in results)
    assert executions <= 4
    assert sum(r.batch_size for r in results if r.executed) == 8  # every request counted in one execution
    assert max(r.batch_size for r in results) >= 2


def test_requests_that_cannot_join_run_in_their_own_batches():
    """Other non-batch dimensions, or more rows than fit, wait for another batch."""
    runner = ModelRunner(Loader(gather=GATHER))
    spec = target("gather", batching=batching(max_batch=4))
    shapes = [(1, 2), (1, 2), (1, 3), (3, 2), (2, 3), (4, 2)]
    rng = np.random.default_rng(2)
    idx = [rng.integers(0, 10, size=s, dtype=np.int64) for s in shapes]
    results = _concurrently([lambda i=i: runner.run(spec, {"idx": i}, ["y"], rows=i.shape[0]) for i in idx])
    for i, result in zip(idx, results):
        np.testing.assert_array_equal(result.outputs[0], TABLE[i])
        assert result.batch_size <= 4
    assert sum(r.batch_size for r in results if r.executed) == sum(s[0] for s in shapes)


def test_preferred_batch_size_is_sent_without_waiting_for_the_delay():
    runner = ModelRunner(Loader(affine=AFFINE))
    spec = target("affine", batching=batching(delay_us=5_000_000, preferred_batch_sizes=(2,)))
    x = np.ones((1, 4), dtype=np.float32)
    runner.run(target("affine"), {"x": x}, ["y"])  # warm the plain session (another LoadedVersion)
    started = time.monotonic()
    results = _concurrently([lambda: runner.run(spec, {"x": x}, ["y"]) for _ in range(2)])
    assert time.monotonic() - started < 2.5  # not the 5 s delay
    assert [r.batch_size for r in results] == [2, 2]


def test_a_failed_batch_fails_only_its_requests():
    runner = ModelRunner(Loader(gather=GATHER))
    spec = target("gather", batching=batching(delay_us=200_000, max_batch=4))
    good = np.array([[1, 2]], dtype=np.int64)
    bad = np.array([[1, 99]], dtype=np.int64)  # index 99: the run fails
    results = _concurrently([lambda i=i: runner.run(spec, {"idx": i}, ["y"]) for i in (good, bad, good, good)])
    assert all(isinstance(r, InvalidInput) for r in results), results
    assert "the model rejected the inputs" in str(results[1])
    again = runner.run(spec, {"idx": good}, ["y"])  # the next batch is unaffected
    np.testing.assert_array_equal(again.outputs[0], TABLE[good])


def test_a_deadline_that_passes_in_the_queue_is_not_run():
    runner = ModelRunner(Loader(affine=AFFINE))
    spec = target("affine", batching=batching(delay_us=1_000_000))
    x = np.ones((1, 4), dtype=np.float32)
    runner._get(spec)  # loaded first: the deadline passes in the batcher's queue, not in the load (which it bounds too)
    late = time.monotonic() + 0.1
    results = _concurrently(
        [lambda: runner.run(spec, {"x": x}, ["y"], deadline=late), lambda: runner.run(spec, {"x": 2 * x}, ["y"])]
    )
    assert isinstance(results[0], DeadlineExceeded) and "queued for a batch; it was not run" in str(results[0])
    np.testing.assert_allclose(results[1].outputs[0], 2 * (2 * x) + 1)
    assert (results[1].batch_size, results[1].executed) == (1, True)  # the expired request did not ride along


@pytest.mark.parametrize("preserve", [False, True])
def test_preserve_ordering_releases_answers_in_arrival_order(preserve):
    """A slow request then a fast one, on two instances: the fast one answers
    at once unless preserve_ordering holds it until the slow one is done."""
    runner = ModelRunner(Loader(slow=SLOW))
    spec = target("slow", instances=2, batching=batching(delay_us=0, max_batch=1, preserve_ordering=preserve))
    x = np.ones((1, 256), dtype=np.float32)
    runner.run(spec, {"x": x, "n": np.array(1, dtype=np.int64)}, ["y"])
    slow = threading.Thread(target=runner.run, args=(spec, {"x": x, "n": np.array(200000, dtype=np.int64)}, ["y"]))
    started = time.monotonic()
    slow.start()
    time.sleep(0.05)
    fast = runner.run(spec, {"x": x, "n": np.array(1, dtype=np.int64)}, ["y"])
    fast_answered = time.monotonic() - started
    slow.join()
    slow_answered = time.monotonic() - started
    assert fast.executed and slow_answered > 0.3
    if preserve:  # held back until the slow one was done
        assert fast_answered > 0.9 * slow_answered - 0.05
    else:
        assert fast_answered < 0.5 * slow_answered
