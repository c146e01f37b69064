"""Which consecutive steps of an ensemble run together on one worker
(inference/ensembles/segments.py ``fuse``), on plain plans, and a fused plan
run by the graph runner: its results and a failing step inside a segment
named."""

from __future__ import annotations

import numpy as np
import pytest

from inference.ensembles import plan as ensembles
from inference.ensembles.plan import Plan, Step, StepFailed
from inference.ensembles.segments import Segment, fuse
from inference.protocol.errors import InvalidInput
from tests.inference.test_ensembles import _diamond


def _step(number, model, reads, writes):
    return Step(number, model, 1, {f"in{i}": t for i, t in enumerate(reads)}, {"out": writes})


def _anything(steps) -> bool:
    return True


def _units(plan: Plan) -> list:
    """Each unit as its step numbers (a tuple for a segment, an int for a step)."""
    return [tuple(s.number for s in u.steps) if isinstance(u, Segment) else u.number for u in plan.steps]


def test_a_chain_fuses_into_one_segment_reading_the_inputs_and_returning_the_outputs():
    plan = Plan(
        ("X",), ("OUT",), (_step(1, "a", ["X"], "t1"), _step(2, "b", ["t1"], "t2"), _step(3, "c", ["t2"], "OUT"))
    )
    fused = fuse(plan, _anything)
    assert _units(fused) == [(1, 2, 3)]
    (segment,) = fused.steps
    assert segment.input_map == {"X": "X"} and segment.output_map == {"OUT": "OUT"}
    assert fused.waits == {1: frozenset()}


def test_a_long_chain_runs_as_segments_of_at_most_segment_max_steps():
    """A 40-step chain with segments of at most 16 steps: 16 + 16 + 8, each
    reading the last tensor of the one before, and waiting for it."""
    steps = tuple(_step(i, "a", ["X" if i == 1 else f"t{i - 1}"], "OUT" if i == 40 else f"t{i}") for i in range(1, 41))
    fused = fuse(Plan(("X",), ("OUT",), steps), _anything)
    assert _units(fused) == [tuple(range(1, 17)), tuple(range(17, 33)), tuple(range(33, 41))]
    first, second, third = fused.steps
    assert (first.input_map, first.output_map) == ({"X": "X"}, {"t16": "t16"})
    assert (second.input_map, second.output_map) == ({"t16": "t16"}, {"t32": "t32"})
    assert (third.input_map, third.output_map) == ({"t32": "t32"}, {"OUT": "OUT"})
    assert fused.waits == {1: frozenset(), 17: frozenset({1}), 33: frozenset({17})}


def test_a_diamond_fuses_nothing_so_no_step_waits_longer():
    """pre's tensor is read by two steps, and join reads two: nothing may chain."""
    plan = _diamond()
    assert fuse(plan, _anything) is plan


def test_a_step_that_also_reads_an_earlier_tensor_outside_the_chain_breaks_it():
    plan = Plan(
        ("X",),
        ("OUT",),
        (_step(1, "a", ["X"], "t1"), _step(2, "b", ["t1"], "t2"), _step(3, "c", ["t2", "t1"], "OUT")),
    )
    assert fuse(plan, _anything) is plan  # t1 is read by 2 and 3; 3 waits on 1 and 2, 2 alone is no chain for it


def test_a_later_step_may_read_ensemble_inputs_and_any_tensor_of_the_chain():
    plan = Plan(
        ("X", "Y"),
        ("OUT",),
        (_step(1, "a", ["X"], "t1"), _step(2, "b", ["t1", "Y"], "t2"), _step(3, "c", ["t2"], "OUT")),
    )
    fused = fuse(plan, _anything)
    assert _units(fused) == [(1, 2, 3)]
    assert fused.steps[0].input_map == {"X": "X", "Y": "Y"}


def test_steps_that_do_not_fit_together_split_the_chain():
    plan = Plan(
        ("X",),
        ("OUT",),
        tuple(_step(n, model, [r], w) for n, model, r, w in [(1, "a", "X", "t1"), (2, "b", "t1", "t2"),
                                                               (3, "cached", "t2", "t3"), (4, "d", "t3", "t4"),
                                                               (5, "e", "t4", "OUT")]),
    )  # fmt: skip
    fused = fuse(plan, lambda steps: all(s.model != "cached" for s in steps))
    assert _units(fused) == [(1, 2), 3, (4, 5)]
    assert fused.waits == {1: frozenset(), 3: {1}, 4: {3}}
    assert fused.steps[0].output_map == {"t2": "t2"}  # read after the segment: returned
    assert fuse(plan, lambda steps: len(steps) <= 2).steps[0].steps == plan.steps[:2]


def test_a_middle_ensemble_output_is_returned_and_two_independent_chains_fuse_apart():
    plan = Plan(
        ("X",),
        ("MID", "P", "Q"),
        (
            _step(1, "a", ["X"], "MID"),
            _step(2, "b", ["MID"], "P"),
            _step(3, "c", ["X"], "q"),
            _step(4, "d", ["q"], "Q"),
        ),
    )
    fused = fuse(plan, _anything)
    assert _units(fused) == [(1, 2), (3, 4)]
    assert fused.steps[0].output_map == {"MID": "MID", "P": "P"}
    assert fused.waits == {1: frozenset(), 3: frozenset()}


def test_graph_order_not_config_order_decides_the_chain():
    plan = Plan(("X",), ("OUT",), (_step(1, "second", ["t"], "OUT"), _step(2, "first", ["X"], "t")))
    fused = fuse(plan, _anything)
    assert _units(fused) == [(2, 1)]


def _run_by_hand(unit, inputs: dict) -> dict:
    """A runner: each model adds its step number; model 'bad' refuses its input."""

    def one(step, values: dict) -> dict:
        if step.model == "bad":
            raise InvalidInput("input 'in0' has shape [3], but model 'bad' expects [2]")
        return {"out": values["in0"] + step.number}

    if not isinstance(unit, Segment):
        return one(unit, inputs)
    tensors = dict(inputs)
    for step in unit.steps:
        try:
            outputs = one(step, {name: tensors[t] for name, t in step.input_map.items()})
        except Exception as exc:
            raise StepFailed(step, exc) from None
        tensors.update({t: outputs[name] for name, t in step.output_map.items()})
    return {t: tensors[t] for t in unit.output_map}


def test_a_fused_plan_runs_to_the_same_tensors_and_a_failing_step_inside_is_named():
    steps = (_step(1, "a", ["X"], "t1"), _step(2, "b", ["t1"], "t2"), _step(3, "c", ["t2"], "OUT"))
    plan = Plan(("X",), ("OUT",), steps)
    x = np.arange(3.0)
    plain = ensembles.run("e", plan, {"X": x}, _run_by_hand)
    fused = ensembles.run("e", fuse(plan, _anything), {"X": x}, _run_by_hand)
    np.testing.assert_array_equal(fused["OUT"], x + 6)
    np.testing.assert_array_equal(plain["OUT"], fused["OUT"])
    assert "t1" not in fused  # the intermediate tensors stayed in the segment

    failing = Plan(("X",), ("OUT",), (steps[0], Step(2, "bad", 1, {"in0": "t1"}, {"out": "t2"}), steps[2]))
    with pytest.raises(InvalidInput) as info:
        ensembles.run("e", fuse(failing, _anything), {"X": x}, _run_by_hand)
    assert (
        info.value.message
        == "ensemble 'e' step 2 (model 'bad' version 1): input 'in0' has shape [3], but model 'bad' expects [2]"
    )
