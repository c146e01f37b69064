"""The ensemble graph: checks, dependency order, independent steps at once, errors naming the step."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from inference.ensembles import plan as ensembles
from inference.ensembles.plan import EnsembleError, Plan, Step
from inference.protocol.errors import InvalidInput, ModelNotReady


def _step(number, model, reads, writes, version=1):
    return Step(number, model, version, {f"in{i}": t for i, t in enumerate(reads)}, {"out": writes})


def _diamond() -> Plan:
    return Plan(
        ("X",),
        ("OUT",),
        (
            _step(1, "pre", ["X"], "a"),
            _step(2, "left", ["a"], "b"),
            _step(3, "right", ["a"], "c"),
            _step(4, "join", ["b", "c"], "OUT"),
        ),
    )


def test_waits_are_the_writers_of_what_a_step_reads():
    plan = _diamond()
    assert plan.waits == {1: frozenset(), 2: {1}, 3: {1}, 4: {2, 3}}


@pytest.mark.parametrize(
    "steps, outputs, message",
    [
        ([_step(1, "a", ["X"], "t"), _step(2, "b", ["X"], "t")], ("t",), "step 2 (model 'b') writes 't', which step 1"),
        ([_step(1, "a", ["X"], "X")], ("X",), "writes 'X', which is an input of the ensemble"),
        ([_step(1, "a", ["nope"], "OUT")], ("OUT",), "reads 'nope' (into its input 'in0'), which is neither"),
        ([_step(1, "a", ["t2"], "t1"), _step(2, "b", ["t1"], "t2")], ("t1",), "the steps form a cycle: steps 1, 2"),
        ([_step(1, "a", ["t1"], "t1")], ("t1",), "reads 't1', which it writes"),
        ([_step(1, "a", ["X"], "t")], ("OUT",), "no step writes the ensemble output(s) OUT"),
    ],
)
def test_malformed_graphs_are_refused(steps, outputs, message):
    with pytest.raises(EnsembleError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Plan(("X",), outputs, tuple(steps))


def test_plan_round_trips_through_json_and_its_sha256_is_stable():
    plan = _diamond()
    again = Plan.from_json(plan.as_json())
    assert again == plan and again.sha256() == plan.sha256()
    other = Plan.from_json({**plan.as_json(), "steps": [{**s, "model_version": 2} for s in plan.as_json()["steps"]]})
    assert other.sha256() != plan.sha256()
    assert plan.pins() == {("pre", 1), ("left", 1), ("right", 1), ("join", 1)}
    assert ensembles.plan_of({"ensemble": plan.as_json()}) == plan
    assert ensembles.plan_of({}) is None and ensembles.plan_of({"ensemble": {"steps": "x"}}) is None


def test_run_chains_steps_and_runs_independent_ones_at_once():
    plan = _diamond()
    both_running = threading.Barrier(2, timeout=5)  # left and right must be in flight together
    threads = {}

    def run_step(step, inputs):
        threads[step.model] = threading.current_thread().name
        if step.model in ("left", "right"):
            both_running.wait()
        ops = {
            "pre": lambda a: a * 2,
            "left": lambda a: a + 1,
            "right": lambda a: a - 1,
            "join": lambda b, c: b * c,
        }
        return {"out": ops[step.model](*(inputs[f"in{i}"] for i in range(len(inputs))))}

    x = np.arange(4, dtype=np.float32)
    tensors = ensembles.run("e", plan, {"X": x}, run_step)
    np.testing.assert_array_equal(tensors["OUT"], (x * 2 + 1) * (x * 2 - 1))
    assert threads["pre"] == threading.current_thread().name  # the first ready step runs in the caller's thread
    assert threads["left"] != threads["right"]


def test_a_failing_step_is_named_and_keeps_its_category():
    plan = _diamond()

    def run_step(step, inputs):
        if step.model == "right":
            raise InvalidInput("input 'in0' has shape [4], but model 'right' expects [3]")
        if step.model == "left":
            time.sleep(0.05)
        return {"out": inputs["in0"]}

    with pytest.raises(InvalidInput) as caught:
        ensembles.run("e", plan, {"X": np.zeros(4)}, run_step)
    assert str(caught.value) == (
        "ensemble 'e' step 3 (model 'right' version 1): input 'in0' has shape [4], but model 'right' expects [3]"
    )
    assert caught.value.http_status == 400


def test_other_failures_keep_their_class_or_become_internal():
    plan = Plan(("X",), ("OUT",), (_step(1, "only", ["X"], "OUT", version=7),))

    def not_ready(step, inputs):
        raise ModelNotReady("version 7 of model 'only' is not ready")

    with pytest.raises(ModelNotReady, match=r"^ensemble 'e' step 1 \(model 'only' version 7\): version 7"):
        ensembles.run("e", plan, {"X": np.zeros(1)}, not_ready)

    def broken(step, inputs):
        raise KeyError("boom")

    with pytest.raises(
        ensembles.InferenceError, match=r"step 1 \(model 'only' version 7\): internal error \(KeyError\)"
    ):
        ensembles.run("e", plan, {"X": np.zeros(1)}, broken)

    with pytest.raises(ensembles.InferenceError, match="it returned no output 'out'"):
        ensembles.run("e", plan, {"X": np.zeros(1)}, lambda step, inputs: {})


def _record(name, versions, platform="onnxruntime_onnx", pinned=(), loaded=True):
    from inference.ports import ModelRecord, VersionRecord

    tensor = [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
    rows = tuple(
        VersionRecord(number, state, "", f"{name}{number}", "", 0, tensor, tensor, properties)
        for number, state, properties in versions
    )
    return ModelRecord(name, platform, 0, "latest", 1, (), loaded, versions=rows, pinned=tuple(pinned))


def test_the_snapshot_serves_an_ensemble_while_what_it_pins_serves():
    """A pinned version serves whatever the policy says; an ensemble whose step
    does not serve does not serve either, its reason naming the step."""
    from inference.serving.snapshot import build_snapshot

    plan = Plan(("X",), ("Y",), (Step(1, "a", 1, {"x": "X"}, {"y": "t"}), Step(2, "b", 1, {"x": "t"}, {"y": "Y"})))
    ensemble = _record("e", [(1, "READY", {"ensemble": plan.as_json()})], platform="ensemble")
    a = _record("a", [(1, "READY", {}), (2, "READY", {})], pinned=[1])  # latest 1 alone would serve only 2
    b = _record("b", [(1, "READY", {})])
    snapshot = build_snapshot([ensemble, a, b])
    assert snapshot["a"].served == (2, 1)
    entry = snapshot["e"].versions[1]
    assert entry.serving and entry.target is None and entry.ensemble == plan

    unloaded = _record("b", [(1, "READY", {})], loaded=False)
    entry = build_snapshot([ensemble, a, unloaded])["e"].versions[1]
    assert not entry.serving
    assert entry.reason.startswith("step 2: version 1 of model 'b' does not serve (the model is unloaded")
    entry = build_snapshot([ensemble, a])["e"].versions[1]
    assert (entry.serving, entry.reason) == (False, "step 2: version 1 of model 'b' does not exist")
    broken = _record("e", [(1, "READY", {"ensemble": {"steps": []}})], platform="ensemble")
    assert "plan does not read" in build_snapshot([broken, a, b])["e"].versions[1].reason
