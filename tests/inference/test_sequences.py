"""Sequence batching in the model runner (Triton's semantics): real ONNX
Runtime sessions of the stateful models built in code, expected values
computed with numpy; and the configuration's checks (Triton's messages)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from inference.protocol.errors import DeadlineExceeded, InvalidInput, ModelNotReady, RateLimited
from inference.runtime.execution import RunTarget
from inference.runtime.runner import ModelRunner
from inference.runtime.sequences.batcher import SequenceBatcher
from inference.runtime.sequences.policy import (
    SequenceConfigError,
    SequencePolicy,
    SequenceRequest,
    request_for,
    sequence_parameters,
    split_draw,
)
from inference.workers import messages
from inference.workers.client.sequence_routes import SequenceRoutes
from inference.workers.placement import Worker
from models_store.config.triton import ConfigError, parse_config
from tests.inference.test_runner import Loader
from tests.support import onnx_models as m


def policy_of(config: str) -> SequencePolicy:
    parsed = parse_config(config)
    return SequencePolicy.from_config(parsed.sequence_batching, parsed.max_batch_size, parsed.name)


def seq_target(name: str, config: str, instances: int = 1) -> RunTarget:
    return RunTarget(name, 1, f"sha-{name}", name, 100, instances, None, policy_of(config))


def ask(runner, target, value: int, corrid, start=False, end=False, owner="", outputs=("OUTPUT",), deadline=None):
    x = np.array([[value]], dtype=np.int32) if target.sequence.batched else np.array([value], dtype=np.int32)
    request = SequenceRequest(corrid, start, end, owner)
    return runner.run(target, {"INPUT": x}, list(outputs), 1, deadline, request)


SIMPLE = m.sequence_config("simple_sequence")
DYNA = m.sequence_config(
    "dyna", strategy="oldest { max_candidate_sequences: 4 max_queue_delay_microseconds: 20000 }",
    kinds=("START", "END", "READY"), corrid="UINT64",
)  # fmt: skip
ACCUMULATOR = m.sequence_config(
    "acc", kinds=("START",),
    state='state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] } ]',
)  # fmt: skip


def test_triton_simple_sequence_example_values():
    """Triton's simple_sequence client example: two interleaved sequences;
    OUTPUT = (INPUT + START) * READY: 1 (0 + START) then the values."""
    runner = ModelRunner(Loader(simple=m.sequence_simple()))
    target = seq_target("simple", SIMPLE)
    values = [11, 7, 5, 3, 2, 0, 1]
    got: dict[int, list[int]] = {1000: [], 1001: []}
    for corrid, first, sign in ((1000, 0, 1), (1001, 100, -1)):
        sent = [first] + [sign * v for v in values]
        for i, value in enumerate(sent):
            out = ask(runner, target, value, corrid, start=i == 0, end=i == len(sent) - 1).outputs[0]
            got[corrid].append(int(out[0, 0]))
    assert got[1000] == [1, *values]
    assert got[1001] == [101, *(-v for v in values)]


def test_a_sequence_not_started_is_refused_with_tritons_message():
    runner = ModelRunner(Loader(simple=m.sequence_simple()))
    target = seq_target("simple", SIMPLE)
    with pytest.raises(InvalidInput) as info:
        ask(runner, target, 1, 77)
    assert str(info.value) == (
        "inference request for sequence 77 to model 'simple' must specify the START flag on the first request "
        "of the sequence"
    )
    ask(runner, target, 1, 77, start=True)
    ask(runner, target, 1, 77, end=True)
    with pytest.raises(InvalidInput, match="must specify the START flag"):  # ended: forgotten
        ask(runner, target, 1, 77)


def test_implicit_state_accumulates_per_sequence_and_start_resets_it():
    runner = ModelRunner(Loader(acc=m.sequence_accumulator()))
    target = seq_target("acc", ACCUMULATOR)
    rng = np.random.default_rng(3)
    streams = {corrid: rng.integers(-50, 50, size=6) for corrid in (5, "five", 6)}
    sums = dict.fromkeys(streams, 0)
    for i in range(6):  # interleaved: each request continues its own sequence's state
        for corrid, values in streams.items():
            sums[corrid] += int(values[i])
            out = ask(runner, target, int(values[i]), corrid, start=i == 0, outputs=("OUTPUT", "OUTPUT_STATE"))
            assert int(out.outputs[0][0, 0]) == sums[corrid] == int(out.outputs[1][0, 0])
    # START again on a held sequence: Triton restarts it (state from the start)
    assert int(ask(runner, target, 4, 5, start=True).outputs[0][0, 0]) == 4
    assert int(ask(runner, target, 3, 5, end=True).outputs[0][0, 0]) == 7


def test_owners_keep_apart_sequences_of_the_same_id():
    runner = ModelRunner(Loader(acc=m.sequence_accumulator()))
    target = seq_target("acc", ACCUMULATOR)
    ask(runner, target, 10, 9, start=True, owner="team:a")
    with pytest.raises(InvalidInput, match="START flag"):
        ask(runner, target, 1, 9, owner="team:b")
    assert int(ask(runner, target, 100, 9, start=True, owner="team:b").outputs[0][0, 0]) == 100
    assert int(ask(runner, target, 1, 9, owner="team:a").outputs[0][0, 0]) == 11  # team b did not touch it


def test_direct_batches_concurrent_sequences_with_not_ready_rows():
    """Direct: a batch holds slots 0..n; the controls of each row are its own
    (the model's answer proves START and READY per row)."""
    runner = ModelRunner(Loader(simple=m.sequence_simple()))
    target = seq_target("simple", SIMPLE)
    for corrid in range(1, 5):
        assert int(ask(runner, target, corrid * 10, corrid, start=True).outputs[0][0, 0]) == corrid * 10 + 1
    results: dict = {}
    barrier = threading.Barrier(4)

    def client(corrid):
        barrier.wait()
        results[corrid] = [ask(runner, target, corrid * 10 + i, corrid) for i in range(5)]

    threads = [threading.Thread(target=client, args=(c,)) for c in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for corrid, answers in results.items():
        assert [int(r.outputs[0][0, 0]) for r in answers] == [corrid * 10 + i for i in range(5)]
    assert any(r.batch_size > 1 for answers in results.values() for r in answers)  # batched together


def test_oldest_batches_sequences_and_sends_the_correlation_id():
    """Oldest (simple_dyna_sequence semantics): OUTPUT = (INPUT + START +
    END * CORRID) * READY; concurrent sequences share batches."""
    runner = ModelRunner(Loader(dyna=m.sequence_simple(corrid="UINT64")))
    target = seq_target("dyna", DYNA)
    barrier = threading.Barrier(4)
    results: dict = {}

    def client(corrid):
        barrier.wait()
        outs = []
        for i, value in enumerate([3, 4, 5]):
            outs.append(ask(runner, target, value, corrid, start=i == 0, end=i == 2))
        results[corrid] = outs

    threads = [threading.Thread(target=client, args=(c,)) for c in (1000, 1001, 1002, 1003)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for corrid, outs in results.items():
        assert [int(r.outputs[0][0, 0]) for r in outs] == [3 + 1, 4, 5 + corrid]
    assert any(r.batch_size > 1 for outs in results.values() for r in outs)


def test_backlog_waits_for_a_free_slot():
    """One slot (max_batch_size 1, one instance): a second sequence waits in
    the backlog until the first ends, then runs."""
    config = m.sequence_config("one", max_batch_size=1)
    runner = ModelRunner(Loader(one=m.sequence_simple()))
    target = seq_target("one", config)
    ask(runner, target, 1, 1, start=True)
    done = threading.Event()
    answer = {}

    def second():
        answer["r"] = ask(runner, target, 5, 2, start=True)
        done.set()

    threading.Thread(target=second).start()
    assert not done.wait(0.3)  # held in the backlog
    ask(runner, target, 1, 1, end=True)
    assert done.wait(5) and int(answer["r"].outputs[0][0, 0]) == 6


def test_an_owners_backlog_is_bounded_and_other_owners_still_queue(monkeypatch):
    """One slot: owner a's second and third STARTs wait in the backlog; its
    fourth is refused at once (429) with a bound of 2, while owner b's START
    still queues, and runs once a slot frees."""
    monkeypatch.setattr(SequenceBatcher, "backlog_per_owner", 2)
    config = m.sequence_config("one", max_batch_size=1)
    runner = ModelRunner(Loader(one=m.sequence_simple()))
    target = seq_target("one", config)
    ask(runner, target, 1, 1, start=True, owner="team:a")
    answers = {}
    threads = []
    for corrid, owner in ((2, "team:a"), (3, "team:a"), (4, "team:b")):

        def start(corrid=corrid, owner=owner):
            answers[corrid] = ask(runner, target, corrid, corrid, start=True, end=True, owner=owner)

        threads.append(threading.Thread(target=start))
        threads[-1].start()
        deadline = time.monotonic() + 5  # until it waits in the backlog: the order of the backlog is known
        while runner._loaded[target.key].sequencer.active < 1 + len(threads) and time.monotonic() < deadline:
            time.sleep(0.005)
    with pytest.raises(RateLimited, match="team a already has 2 sequences waiting for a sequence slot"):
        ask(runner, target, 5, 5, start=True, owner="team:a")
    ask(runner, target, 1, 1, end=True, owner="team:a")  # frees the slot: the backlog runs in turn
    for thread in threads:
        thread.join(5)
    assert {corrid: int(r.outputs[0][0, 0]) for corrid, r in answers.items()} == {2: 3, 3: 4, 4: 5}


def test_idle_sequences_are_released():
    config = m.sequence_config("idle", idle_us=100_000)
    runner = ModelRunner(Loader(idle=m.sequence_simple()))
    target = seq_target("idle", config)
    ask(runner, target, 1, 3, start=True)
    ask(runner, target, 1, 3)
    time.sleep(0.4)
    with pytest.raises(InvalidInput, match="must specify the START flag"):
        ask(runner, target, 1, 3)


def test_a_deadline_passing_in_the_queue_is_not_run():
    config = m.sequence_config("one", max_batch_size=1)
    runner = ModelRunner(Loader(one=m.sequence_simple()))
    target = seq_target("one", config)
    ask(runner, target, 1, 1, start=True)
    with pytest.raises(DeadlineExceeded):  # sequence 2 waits in the backlog behind sequence 1
        ask(runner, target, 1, 2, start=True, deadline=time.monotonic() + 0.2)
    ask(runner, target, 1, 1, end=True)
    started = time.monotonic()
    assert int(ask(runner, target, 7, 3, start=True, end=True).outputs[0][0, 0]) == 8  # the slot is free at once
    assert time.monotonic() - started < 0.5
    with pytest.raises(InvalidInput, match="START flag"):  # as in Triton, the expired backlog is forgotten
        ask(runner, target, 1, 2)


@pytest.mark.parametrize("controls", ["fp32_false_true", "bool_false_true"])
def test_fp32_and_bool_controls(controls):
    datatype = {"fp32_false_true": "FP32", "bool_false_true": "BOOL"}[controls]
    runner = ModelRunner(Loader(s=m.sequence_simple(control=datatype)))
    target = seq_target("s", m.sequence_config("s", controls=controls))
    assert int(ask(runner, target, 5, 1, start=True).outputs[0][0, 0]) == 6
    assert int(ask(runner, target, 5, 1, end=True).outputs[0][0, 0]) == 5


def test_without_a_batch_dimension():
    runner = ModelRunner(Loader(s=m.sequence_simple(batch=None)))
    target = seq_target("s", m.sequence_config("s", max_batch_size=0))
    assert ask(runner, target, 5, 1, start=True).outputs[0].tolist() == [6]
    assert ask(runner, target, 2, 1, end=True).outputs[0].tolist() == [2]


def test_string_correlation_ids_reach_the_model():
    config = m.sequence_config("s", corrid="STRING", kinds=("START", "END", "READY"))
    runner = ModelRunner(Loader(s=m.sequence_simple(corrid="BYTES", echo=True)))
    target = seq_target("s", config)
    out = ask(runner, target, 1, "abc-123", start=True, outputs=("OUTPUT", "CORRID_OUT"))
    assert int(out.outputs[0][0, 0]) == 2 and out.outputs[1][0, 0] == "abc-123"


# -- the request's parameters and Triton's checks ---------------------------------------
def test_sequence_parameters_are_type_checked_as_tritons_front_ends_do():
    assert sequence_parameters({}) == (0, False, False)
    assert sequence_parameters({"sequence_id": 2**64 - 1, "sequence_start": True}) == (2**64 - 1, True, False)
    assert sequence_parameters({"sequence_id": "u-1", "sequence_end": True}) == ("u-1", False, True)
    for bad in (-1, 2**64, 1.5, True, None, [1]):
        with pytest.raises(InvalidInput, match="Unable to parse 'sequence_id'"):
            sequence_parameters({"sequence_id": bad})
    with pytest.raises(InvalidInput, match="Unable to parse 'sequence_start'"):
        sequence_parameters({"sequence_id": 1, "sequence_start": 1})


def test_a_string_sequence_id_is_at_most_256_bytes_and_shown_cut():
    """256 bytes of UTF-8 (128 two-byte characters) pass; 257 bytes, or 1 MB,
    are refused naming the limit and showing the first 64 characters and
    "..." (the whole message under 200 characters); anything else sent as
    an ID is shown cut too."""
    assert sequence_parameters({"sequence_id": "é" * 128}) == ("é" * 128, False, False)
    assert sequence_parameters({"sequence_id": "x" * 256})[0] == "x" * 256
    for sent, size in (("é" * 128 + "x", 257), ("y" * (1 << 20), 1 << 20)):
        with pytest.raises(InvalidInput) as info:
            sequence_parameters({"sequence_id": sent, "sequence_start": True})
        assert info.value.message == (
            f"'sequence_id' is {size} bytes long; at most 256 are allowed: \"{sent[:64]}...\""
        )
        assert len(info.value.message) < 200
    with pytest.raises(InvalidInput) as info:
        sequence_parameters({"sequence_id": list(range(100_000))})
    assert info.value.message.endswith("got [0, 1, 2, 3, 4, 5, ...]")
    assert SequenceRequest("z" * 256).describe() == '"' + "z" * 64 + '..."'
    assert SequenceRequest(2**64 - 1).describe() == str(2**64 - 1)


def _worker(name: str) -> Worker:
    return Worker(name, "infer.cpu", None, messages.Announcement(device="cpu"))


def test_a_sequences_worker_is_remembered_once_it_answered():
    """order() picks the worker of a START without remembering it (a
    refused or lost START leaves nothing behind); answered() remembers it,
    and the sequence's next request goes there even when the hash would
    now pick another; a request that ends it forgets it; a lost worker's
    error names the sequence, its ID cut."""
    target = seq_target("s", m.sequence_config("s"))
    routes = SequenceRoutes()
    a, b = _worker("a"), _worker("b")
    start = SequenceRequest("q" * 200, start=True, owner="team:t")
    (picked,) = routes.order(target, start, [a, b])
    assert len(routes) == 0
    routes.answered(target, start, picked)
    assert len(routes) == 1
    other = b if picked is a else a
    going_on = SequenceRequest("q" * 200, owner="team:t")
    assert routes.order(target, going_on, [other, picked]) == [picked]
    with pytest.raises(ModelNotReady) as info:
        routes.order(target, going_on, [other])
    assert info.value.message.startswith(f"sequence \"{'q' * 64}...\" of model 's' was lost: the infer.cpu worker")
    routes.answered(target, SequenceRequest("q" * 200, end=True, owner="team:t"), picked)  # an END: not kept
    routes.forget(target, going_on)
    assert len(routes) == 0


def test_request_checks_in_tritons_order():
    policy = policy_of(m.sequence_config("m", corrid="UINT64"))
    assert request_for(None, "m", (5, True, False), 4, "") is None  # no sequences
    with pytest.raises(InvalidInput) as info:
        request_for(policy, "m", ("s", False, False), 1, "")
    assert str(info.value) == "sequence batching control 'CORRID' data-type is 'BYTES', but model 'm' expects 'UINT64'"
    with pytest.raises(InvalidInput) as info:
        request_for(policy, "m", (5, False, False), 2, "")
    assert "must specify batch-size 1 due to requirements of sequence batcher" in str(info.value)
    with pytest.raises(InvalidInput) as info:
        request_for(policy, "m", (0, False, False), 1, "")
    assert str(info.value) == "inference request to model 'm' must specify a non-zero or non-empty correlation ID"
    strings = policy_of(m.sequence_config("m", corrid="STRING"))
    with pytest.raises(InvalidInput, match="data-type is 'UINT64', but model 'm' expects 'BYTES'"):
        request_for(strings, "m", (0, False, False), 1, "")  # no ID is the integer 0, as in Triton
    assert request_for(strings, "m", ("a", False, False), 1, "team:x") == SequenceRequest("a", False, False, "team:x")


def test_a_split_draw_is_the_same_for_every_request_of_a_sequence():
    assert split_draw({}, "") is None and split_draw({"sequence_id": 0}, "") is None
    a = split_draw({"sequence_id": 7, "sequence_start": True}, "team:a")
    assert a == split_draw({"sequence_id": 7}, "team:a") and 0 <= a < 1
    assert a != split_draw({"sequence_id": "7"}, "team:a") and a != split_draw({"sequence_id": 7}, "team:b")


# -- configuration ---------------------------------------------------------------------------
CONTROL = 'control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START %s } ] } ]'


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (CONTROL % "", "must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true'"),
        (CONTROL % "int32_false_true: [ 0 ]", "'int32_false_true' must have exactly 2 entries"),
        (CONTROL % "int32_false_true: [0, 1] fp32_false_true: [0, 1]", "specifies more than one from"),
        (
            'control_input [ { name: "A" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] },'
            ' { name: "A" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [0, 1] } ] } ]',
            "control tensor 'A' is specified for multiple control kinds",
        ),
        (
            'control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } ] } ]',
            "unexpected data type for control CONTROL_SEQUENCE_CORRID",
        ),
        ("oldest { preferred_batch_size: [ 16 ] }", "preferred batch size must be <= max batch size"),
        ("direct { minimum_slot_utilization: 2.0 }", "minimum slot utilization must be in range"),
        ("iterative_sequence: true", "iterative_sequence is not supported"),
        (
            'state [ { input_name: "I" output_name: "O" data_type: TYPE_INT32 dims: [ -1 ] '
            'initial_state { data_type: TYPE_INT32 dims: [ -1 ] zero_data: true name: "z" } } ]',
            "'initial_state' field for state input name 'I' contains variable dimensions.",
        ),
        (
            'state [ { input_name: "I" output_name: "O" data_type: TYPE_INT32 dims: [ 1 ] '
            'initial_state { data_type: TYPE_INT32 dims: [ 1 ] data_file: "f" name: "z" } } ]',
            "data_file (state 'I') is not supported by this server; use zero_data",
        ),
    ],
)
def test_configurations_triton_refuses_are_refused(body, message):
    with pytest.raises(ConfigError) as info:
        parse_config(f'name: "m" max_batch_size: 8 sequence_batching {{ {body} }}')
    assert message in str(info.value)


def test_the_echo_is_tritons_normalized_form():
    policy = policy_of(
        m.sequence_config(
            "m", strategy="oldest { max_candidate_sequences: 4 }", corrid="UINT64", kinds=("START",),
            state='state [ { input_name: "I" output_name: "O" data_type: TYPE_INT32 dims: [ 1 ] '
            'initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" } } ]',
        )
    )  # fmt: skip
    echo = policy.echo()
    assert echo["max_sequence_idle_microseconds"] == 1_000_000  # Triton's default
    assert echo["oldest"] == {
        "max_candidate_sequences": 4,
        "preferred_batch_size": [8],  # NormalizeModelConfig: max_batch_size
        "max_queue_delay_microseconds": 0,
        "preserve_ordering": False,
    }
    assert echo["control_input"][0] == {
        "name": "START",
        "control": [
            {
                "kind": "CONTROL_SEQUENCE_START",
                "int32_false_true": [0, 1],
                "fp32_false_true": [],
                "bool_false_true": [],
                "data_type": "TYPE_INVALID",
            }
        ],
    }
    assert echo["state"][0]["initial_state"] == [
        {"data_type": "TYPE_INT32", "dims": ["1"], "zero_data": True, "name": "zero"}
    ]
    assert "direct" not in echo and "direct" not in policy_of(SIMPLE).echo()  # not named: not echoed
    with pytest.raises(SequenceConfigError, match="more than once"):
        SequencePolicy.from_config({"state": [echo["state"][0], echo["state"][0]]}, 8, "m")


def test_dynamic_and_sequence_batching_are_one_choice():
    """Triton's scheduling_choice is a oneof: a config cannot have both."""
    with pytest.raises(ConfigError, match='another member of oneof "scheduling_choice"'):
        parse_config(f"{SIMPLE}dynamic_batching {{ }}\n")
