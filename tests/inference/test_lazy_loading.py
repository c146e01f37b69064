"""Sessions load on a version's first request (issue 39, item 2): the
request waits for its load and answers; the wait is bounded (the runner's
``load_wait_seconds``, the request's deadline) while the load goes on;
concurrent first requests share one load; a load nobody waits for any more
is dropped; always-loaded versions load before any request and stay under
the memory budget while others are evicted. Real ONNX Runtime sessions of
``y = 2x + i`` (model i); expected values from numpy."""

from __future__ import annotations

import threading
import time

import numpy as np
import onnxruntime as ort
import pytest

from inference.ports import ModelRecord, VersionRecord
from inference.protocol.errors import DeadlineExceeded, ModelNotReady
from inference.runtime.execution import RunTarget
from inference.runtime.executors import InProcessExecutor, always_loaded
from inference.runtime.onnx import OnnxModel
from inference.runtime.runner import ModelRunner
from inference.serving.snapshot import build_snapshot
from tests.support import onnx_models as m

MODELS = {f"m{i}": m.affine(2.0, float(i)) for i in range(8)}  # m<i>: y = 2x + i, x FP32 [N, 4]
X = np.arange(8, dtype=np.float32).reshape(2, 4)


class SlowLoader:
    """Sessions of MODELS, each load taking ``seconds`` more; records what it loaded (and when it began)."""

    def __init__(self, seconds: float = 0.0, grows: int = 0, memory=None):
        self.seconds = seconds
        self.loads: list[str] = []
        self.grows = grows
        self.memory = memory

    def __call__(self, target: RunTarget) -> OnnxModel:
        self.loads.append(target.artifact)
        time.sleep(self.seconds)
        if self.memory is not None:
            self.memory[0] += self.grows
        return OnnxModel(ort.InferenceSession(MODELS[target.artifact], providers=["CPUExecutionProvider"]))


def target(name: str, **kwargs) -> RunTarget:
    return RunTarget(name, 1, f"sha-{name}", name, 100, **kwargs)


def _answer(runner: ModelRunner, name: str, **kwargs) -> np.ndarray:
    return runner.run(target(name), {"x": X}, ["y"], rows=2, **kwargs).outputs[0]


def test_nothing_loads_before_a_request_and_the_first_request_waits_for_its_load():
    waits = []
    loader = SlowLoader(0.2)
    runner = ModelRunner(loader, on_wait=lambda t, seconds, transient: waits.append((t.model, seconds)))
    assert runner.loaded() == [] and loader.loads == []
    np.testing.assert_allclose(_answer(runner, "m3"), 2 * X + 3)
    assert loader.loads == ["m3"] and [t.model for t in runner.loaded()] == ["m3"]
    assert waits[0][0] == "m3" and waits[0][1] >= 0.2  # the wait is measured (the load-wait metric)
    np.testing.assert_allclose(_answer(runner, "m3"), 2 * X + 3)  # loaded: no wait
    assert len(waits) == 1 and loader.loads == ["m3"]


def test_a_request_waits_at_most_the_bound_while_the_load_goes_on():
    loader = SlowLoader(0.8)
    runner = ModelRunner(loader, load_wait_seconds=0.1)
    started = time.monotonic()
    with pytest.raises(ModelNotReady, match=r"version 1 of model 'm5' is still loading after 0\.1 s"):
        _answer(runner, "m5")
    assert time.monotonic() - started < 0.6  # refused at the bound, not after the load
    time.sleep(1.0)  # the load finished meanwhile, for the requests after it
    np.testing.assert_allclose(_answer(runner, "m5"), 2 * X + 5)
    assert loader.loads == ["m5"]


def test_the_request_deadline_bounds_the_wait():
    runner = ModelRunner(SlowLoader(0.6))
    with pytest.raises(DeadlineExceeded, match="deadline passed while version 1 of model 'm1' was loading"):
        _answer(runner, "m1", deadline=time.monotonic() + 0.1)


def test_concurrent_first_requests_share_one_load():
    loader = SlowLoader(0.3)
    runner = ModelRunner(loader)
    answers: list = [None] * 6
    barrier = threading.Barrier(6)

    def ask(i: int) -> None:
        barrier.wait()
        answers[i] = _answer(runner, "m2")

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert loader.loads == ["m2"]
    for answer in answers:
        np.testing.assert_allclose(answer, 2 * X + 2)


def test_a_queued_load_nobody_waits_for_is_dropped():
    """Loads run one at a time: m7's load queues behind m6's; its only request gives up, so it never runs."""
    loader = SlowLoader(0.6)
    runner = ModelRunner(loader, load_wait_seconds=0.15)
    refused = []

    def ask_m6() -> None:
        with pytest.raises(ModelNotReady, match="still loading"):
            _answer(runner, "m6")
        refused.append("m6")

    first = threading.Thread(target=ask_m6)
    first.start()
    time.sleep(0.05)
    with pytest.raises(ModelNotReady, match="still loading"):
        _answer(runner, "m7")
    first.join()
    time.sleep(0.8)
    assert refused == ["m6"] and loader.loads == ["m6"] and [t.model for t in runner.loaded()] == ["m6"]


def _budgeted(budget: int, grows: int) -> tuple[ModelRunner, SlowLoader]:
    memory = [1_000_000]
    loader = SlowLoader(grows=grows, memory=memory)
    return ModelRunner(loader, budget_bytes=budget, memory=lambda: memory[0]), loader


def test_eviction_keeps_the_budget_and_every_answer_right():
    runner, loader = _budgeted(300, grows=100)  # room for three
    for _round in range(4):
        for i in range(6):
            np.testing.assert_allclose(_answer(runner, f"m{i}"), 2 * X + i)
            assert runner.used <= 300 and len(runner.loaded()) <= 3
    assert runner.counts["evictions"] + runner.counts["transient_loads"] > 0
    assert len(loader.loads) == runner.counts["misses"]


def test_always_loaded_versions_load_first_and_are_never_evicted():
    runner, loader = _budgeted(300, grows=100)
    runner.keep_loaded([target("m0"), target("m1")])  # by the setting's patterns: the targets requests name
    assert sorted(loader.loads) == ["m0", "m1"]  # before any request
    for _ in range(5):
        for i in range(2, 8):  # a working set of six on the one slot left
            np.testing.assert_allclose(_answer(runner, f"m{i}"), 2 * X + i)
    kept = {t.model for t in runner.loaded()}
    assert {"m0", "m1"} <= kept and runner.used <= 300
    np.testing.assert_allclose(_answer(runner, "m0"), 2 * X)
    assert loader.loads.count("m0") == 1 and loader.loads.count("m1") == 1  # never reloaded


def _record(name: str, parameters: dict | None = None) -> ModelRecord:
    config = {"parameters": parameters} if parameters else {}
    version = VersionRecord(1, "READY", "", f"sha-{name}", name, 100, [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
                            [{"name": "y", "datatype": "FP32", "shape": [-1, 4]}])  # fmt: skip
    return ModelRecord(name, "onnxruntime_onnx", 0, "latest", 1, (), True, config=config, versions=(version,))


def test_the_executor_loads_the_operators_always_loaded_models_with_the_first_snapshot():
    """The config's ``always_loaded`` parameter, or a name matching SESSIONS_ALWAYS_LOADED's patterns."""
    loader = SlowLoader()
    executor = InProcessExecutor(ModelRunner(loader), always=("m4", "m6*"))
    snapshot = build_snapshot(
        [_record("m1", {"always_loaded": {"string_value": "true"}}), _record("m2"), _record("m4"), _record("m6")]
    )
    executor.on_snapshot(snapshot)
    assert sorted(loader.loads) == ["m1", "m4", "m6"]  # before the process serves a request
    kept = always_loaded([v.target for entry in snapshot.values() for v in entry.versions.values()], ("m4",))
    assert sorted(t.model for t in kept) == ["m1", "m4"] and [t.always_loaded for t in kept] == [True, False]
    cold = snapshot["m2"].versions[1].target
    assert executor.blocks(cold) and not executor.blocks(snapshot["m4"].versions[1].target)  # a load: off the loop
    result = executor.run(cold, {"x": X}, ["y"], rows=2)
    np.testing.assert_allclose(result.outputs[0], 2 * X + 2)  # the others on their first request
    result = executor.run(snapshot["m6"].versions[1].target, {"x": X}, ["y"], rows=2)
    np.testing.assert_allclose(result.outputs[0], 2 * X + 6)
    assert not executor.blocks(cold) and sorted(loader.loads) == ["m1", "m2", "m4", "m6"]  # none loaded twice
