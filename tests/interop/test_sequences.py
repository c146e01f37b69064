"""Sequence batching as Triton's clients see it (issue 23, item 3): Triton's
sequence example models driven with ``tritonclient`` over HTTP and gRPC
(``sequence_id``, ``sequence_start``, ``sequence_end``; integer and string
correlation IDs), interleaved sequences, implicit state, both strategies,
Triton's errors, idle release, the model configuration echoed, and
sequences kept apart per caller. On the session's live server, so that
``make test`` runs them in process and again in worker mode.

Each sequence's requests go over one client (one connection, hence one
server process: in process every server process keeps its own sequences).
Expected values are computed here, independently of the server.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import EXECUTOR
from tests.support.live import people_with_tokens, request

pytestmark = pytest.mark.interop

MODULES = {"http": httpclient, "grpc": grpcclient}
VALUES = [11, 7, 5, 3, 2, 0, 1]  # Triton's simple_*_sequence_sync_infer_client examples


def client_of(server, transport: str):
    if transport == "http":
        return httpclient.InferenceServerClient(server.http_url)
    return grpcclient.InferenceServerClient(server.grpc_url)


def send(client, model: str, value: int, sequence_id, start=False, end=False, outputs=("OUTPUT",), headers=None):
    """One request of a sequence: INPUT = [[value]] (INT32); the outputs as numpy."""
    module = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    inp = module.InferInput("INPUT", [1, 1], "INT32")
    inp.set_data_from_numpy(np.full((1, 1), value, dtype=np.int32))
    result = client.infer(
        model,
        [inp],
        outputs=[module.InferRequestedOutput(o) for o in outputs],
        sequence_id=sequence_id,
        sequence_start=start,
        sequence_end=end,
        headers=dict(headers) if headers else None,
    )  # fmt: skip  (a copy: tritonclient.http adds its own headers to the dict)
    return [result.as_numpy(o) for o in outputs]


def sync_send(client, model: str, values: list[int], sequence_id, headers=None) -> list[int]:
    """The examples' sync_send: START on the first value, END on the last."""
    out = []
    for i, value in enumerate(values):
        (y,) = send(client, model, value, sequence_id, start=i == 0, end=i == len(values) - 1, headers=headers)
        out.append(int(y[0][0]))
    return out


def refused(call) -> tuple[str, str]:
    with pytest.raises(InferenceServerException) as info:
        call()
    return str(info.value.status()), info.value.message()


@pytest.mark.parametrize("transport", ["http", "grpc"])
@pytest.mark.parametrize("dyna", [False, True], ids=["simple_sequence", "simple_dyna_sequence"])
def test_tritons_sequence_sync_examples(model_server, transport, dyna):
    """What Triton's simple_{http,grpc}_sequence_sync_infer_client.py do
    (with -d: the dyna models, oldest strategy with a CORRID control), with
    the values they expect: OUTPUT = (INPUT + START [+ END * CORRID]) * READY;
    the string dyna model accumulates, + END * int(CORRID)."""
    client = client_of(model_server, transport)
    offset = 0 if dyna else 1  # the examples' -o: IDs apart between the runs
    ids = (1000 + offset * 2, 1001 + offset * 2)
    string_id = "1002" if dyna else str(uuid.uuid4())
    int_model = "simple_dyna_sequence" if dyna else "simple_sequence"
    string_model = "simple_string_dyna_sequence" if dyna else "simple_sequence"
    seq0 = sync_send(client, int_model, [0, *VALUES], ids[0])
    seq1 = sync_send(client, int_model, [100, *(-v for v in VALUES)], ids[1])
    seq2 = sync_send(client, string_model, [20, *(-v for v in VALUES)], string_id)
    for i in range(len(seq0)):
        expected0 = 1 if i == 0 else VALUES[i - 1]
        expected1 = 101 if i == 0 else -VALUES[i - 1]
        if dyna:  # the string model accumulates its inputs (implicit state)
            expected2 = 20 if i == 0 else -VALUES[i - 1] + seq2[i - 1]
        else:
            expected2 = 21 if i == 0 else -VALUES[i - 1]
        if dyna and i != 0 and VALUES[i - 1] == 1:  # the last request: END adds the correlation ID
            expected0, expected1, expected2 = expected0 + ids[0], expected1 + ids[1], expected2 + int(string_id)
        assert (seq0[i], seq1[i], seq2[i]) == (expected0, expected1, expected2), i


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_interleaved_sequences_keep_their_implicit_state(model_server, transport):
    """Three sequences of the accumulator interleaved (integer and string
    IDs), from three clients at once: each running sum is its own (numpy's
    cumsum); START restarts a sequence; the zero-initialised accumulator
    (oldest strategy) too, with its state output requested."""
    rng = np.random.default_rng(11)
    streams = {
        7001: rng.integers(-1000, 1000, 12),
        "acc-a": rng.integers(-1000, 1000, 12),
        7002: rng.integers(0, 9, 12),
    }
    answers: dict = {}

    def run(sequence_id):
        client = client_of(model_server, transport)
        values = [int(v) for v in streams[sequence_id]]
        got = [
            int(send(client, "seq_accumulator", v, sequence_id, start=i == 0)[0][0][0]) for i, v in enumerate(values)
        ]
        zero = []
        for i, v in enumerate(values):
            out, state = send(
                client, "seq_accumulator_zero", v, sequence_id, start=i == 0, outputs=("OUTPUT", "OUTPUT_STATE")
            )
            zero.append((int(out[0][0]), int(state[0][0])))
        restarted = int(send(client, "seq_accumulator", 5, sequence_id, start=True)[0][0][0])
        last = int(send(client, "seq_accumulator", 6, sequence_id, end=True)[0][0][0])
        answers[sequence_id] = (got, zero, restarted, last)

    threads = [threading.Thread(target=run, args=(sid,)) for sid in streams]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert set(answers) == set(streams)
    for sequence_id, (got, zero, restarted, last) in answers.items():
        sums = np.cumsum(streams[sequence_id]).tolist()
        assert got == sums
        assert zero == [(s, s) for s in sums]
        assert (restarted, last) == (5, 11)


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_tritons_sequence_errors(model_server, transport):
    """Triton's messages: a continuation without START, a batch of two, no
    correlation ID, a string ID for an integer CORRID; the server stays ready."""
    client = client_of(model_server, transport)
    bad = "400" if transport == "http" else "StatusCode.INVALID_ARGUMENT"
    status, message = refused(lambda: send(client, "simple_sequence", 1, 424242))
    assert status == bad and message.endswith(
        "inference request for sequence 424242 to model 'simple_sequence' must specify the START flag on the "
        "first request of the sequence"
    )
    status, message = refused(lambda: send(client, "simple_sequence", 1, "never-started"))
    assert status == bad and "sequence never-started to model 'simple_sequence' must specify the START flag" in message
    module = MODULES[transport]
    two = module.InferInput("INPUT", [2, 1], "INT32")
    two.set_data_from_numpy(np.ones((2, 1), dtype=np.int32))
    status, message = refused(lambda: client.infer("simple_sequence", [two], sequence_id=9, sequence_start=True))
    assert status == bad and "must specify batch-size 1 due to requirements of sequence batcher" in message
    status, message = refused(lambda: send(client, "simple_sequence", 1, 0, start=True))
    assert status == bad and "must specify a non-zero or non-empty correlation ID" in message
    status, message = refused(lambda: send(client, "simple_dyna_sequence", 1, "text", start=True))
    assert (
        status == bad
        and (
            "sequence batching control 'CORRID' data-type is 'BYTES', but model 'simple_dyna_sequence' expects 'UINT64'"
        )
        in message
    )
    assert client.is_server_ready()


def test_sequence_parameters_of_the_wrong_type_are_400(model_server):
    """Triton's HTTP front end: sequence_id an unsigned integer or a string,
    the flags booleans ("Unable to parse ..."), for every model."""
    for model in ("simple_sequence", "simple"):
        for params, name in (
            ({"sequence_id": -1}, "sequence_id"),
            ({"sequence_id": 1.5}, "sequence_id"),
            ({"sequence_id": 5, "sequence_start": "yes"}, "sequence_start"),
            ({"sequence_id": 5, "sequence_end": 1}, "sequence_end"),
        ):
            inputs = [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [1]}]
            body = json.dumps({"inputs": inputs, "parameters": params}).encode()
            status, answer = request(model_server, "POST", f"/v2/models/{model}/infer", body)
            assert status == 400 and f"Unable to parse '{name}'" in answer["error"], (model, params, answer)


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_sequence_ids_are_at_most_256_bytes_and_errors_show_them_cut(model_server, transport):
    """A string ID of 256 bytes (128 two-byte characters) runs a sequence;
    257 bytes, or 1 MB, is 400 / INVALID_ARGUMENT naming the limit (in
    worker mode too: refused before any worker is asked), the answer
    showing the ID's first 64 characters, never the whole ID; Triton's
    START error shows a long ID cut too; the server stays ready."""
    client = client_of(model_server, transport)
    bad = "400" if transport == "http" else "StatusCode.INVALID_ARGUMENT"
    longest = ("é" if transport == "http" else "è") * 128
    values = [4, -1, 10]
    assert sync_send(client, "seq_accumulator", values, longest) == np.cumsum(values).tolist()
    for sent, size in ((longest + "x", 257), ("m" * (1 << 20), 1 << 20)):
        status, message = refused(lambda sent=sent: send(client, "seq_accumulator", 1, sent, start=True))
        assert status == bad and message.endswith(
            f"'sequence_id' is {size} bytes long; at most 256 are allowed: \"{sent[:64]}...\""
        )
        assert len(message) < 300
    never = "n" * 200
    status, message = refused(lambda: send(client, "seq_accumulator", 1, never))
    assert status == bad and message.endswith(
        f"inference request for sequence {'n' * 64}... to model 'seq_accumulator' must specify the START flag on "
        "the first request of the sequence"
    )
    assert client.is_server_ready()


def test_a_model_without_sequence_batching_ignores_sequence_parameters(model_server):
    """As Triton: the request runs as any other (no state, no START check)."""
    client = httpclient.InferenceServerClient(model_server.http_url)
    x = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(x)
    inputs[1].set_data_from_numpy(x)
    for start in (False, True):  # a continuation first: no "START flag" error
        result = client.infer("simple", inputs, sequence_id=31337, sequence_start=start)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * x)


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_an_idle_sequence_is_released(model_server, transport):
    """seq_idle: max_sequence_idle_microseconds 200000; a sequence idle longer
    is released, and continuing it gets Triton's START error."""
    client = client_of(model_server, transport)
    sequence_id = 555 if transport == "http" else 556
    assert int(send(client, "seq_idle", 4, sequence_id, start=True)[0][0][0]) == 5
    assert int(send(client, "seq_idle", 4, sequence_id)[0][0][0]) == 4  # within the idle time
    time.sleep(0.6)
    _status, message = refused(lambda: send(client, "seq_idle", 4, sequence_id))
    assert "must specify the START flag" in message
    assert int(send(client, "seq_idle", 4, sequence_id, start=True, end=True)[0][0][0]) == 5


def test_config_metadata_and_extensions(model_server):
    """GET /v2/models/<m>/config and gRPC ModelConfig answer sequence_batching
    as Triton does; the control and state inputs are the server's, so the
    metadata lists only INPUT; server metadata lists the sequence extension."""
    http = httpclient.InferenceServerClient(model_server.http_url)
    config = http.get_model_config("simple_dyna_sequence")["sequence_batching"]
    assert config["max_sequence_idle_microseconds"] == 10_000_000
    assert config["oldest"] == {
        "max_candidate_sequences": 1024,
        "preferred_batch_size": [8],
        "max_queue_delay_microseconds": 10000,
        "preserve_ordering": False,
    }
    kinds = {c["name"]: c["control"][0] for c in config["control_input"]}
    assert kinds["START"]["kind"] == "CONTROL_SEQUENCE_START" and kinds["START"]["int32_false_true"] == [0, 1]
    assert kinds["CORRID"] == {
        "kind": "CONTROL_SEQUENCE_CORRID",
        "int32_false_true": [],
        "fp32_false_true": [],
        "bool_false_true": [],
        "data_type": "TYPE_UINT64",
    }
    simple = http.get_model_config("simple_sequence")
    assert "direct" not in simple["sequence_batching"] and "oldest" not in simple["sequence_batching"]
    assert simple["sequence_batching"]["max_sequence_idle_microseconds"] == 1_000_000  # Triton's default
    assert [i["name"] for i in simple["input"]] == ["INPUT"]
    assert [i["name"] for i in http.get_model_metadata("simple_sequence")["inputs"]] == ["INPUT"]
    state = http.get_model_config("seq_accumulator_zero")["sequence_batching"]["state"][0]
    assert state["input_name"] == "INPUT_STATE" and state["dims"] == [1]
    assert state["initial_state"][0]["zero_data"] is True
    assert [o["name"] for o in http.get_model_metadata("seq_accumulator")["outputs"]] == ["OUTPUT"]  # state hidden
    grpc = grpcclient.InferenceServerClient(model_server.grpc_url)
    message = grpc.get_model_config("simple_dyna_sequence").config.sequence_batching
    assert message.max_sequence_idle_microseconds == 10_000_000
    assert message.oldest.max_candidate_sequences == 1024
    assert [(c.name, c.control[0].kind) for c in message.control_input] == [
        ("START", 0), ("END", 2), ("READY", 1), ("CORRID", 3)
    ]  # fmt: skip
    assert message.state == [] and grpc.get_model_config("seq_accumulator").config.sequence_batching.state[0].dims == [
        1
    ]
    extensions = http.get_server_metadata()["extensions"]
    assert "sequence" in extensions and "sequence(string_id)" in extensions


@pytest.fixture(scope="module")
def team_tokens(model_server):
    """Authorization headers of ann and amy (team a...) and ben (team b...)."""
    run = uuid.uuid4().hex[:6]
    tokens = people_with_tokens(
        model_server, **{f"ann{run}": f"a{run}", f"amy{run}": f"a{run}", f"ben{run}": f"b{run}"}
    )
    return [{"authorization": f"Bearer {tokens[n + run]}"} for n in ("ann", "amy", "ben")]


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_a_sequence_belongs_to_its_callers_team(model_server, team_tokens, transport):
    """Tokens not required: a sequence started with team A's token cannot be
    continued by team B's token or by an anonymous caller (theirs is another
    sequence of the same ID), nor disturbed when B starts its own; a second
    member of team A continues it. One client (one connection) for all."""
    ann, amy, ben = team_tokens
    client = client_of(model_server, transport)
    sid = 8800 if transport == "http" else 8801
    out = lambda value, **kw: int(send(client, "seq_accumulator", value, sid, **kw)[0][0][0])  # noqa: E731
    assert out(10, start=True, headers=ann) == 10
    assert "must specify the START flag" in refused(lambda: out(1, headers=ben))[1]
    assert "must specify the START flag" in refused(lambda: out(1))[1]  # anonymous
    assert out(1000, start=True, headers=ben) == 1000  # B's own sequence of the same ID
    assert out(5, headers=amy) == 15  # team A's: untouched by B
    assert out(1, headers=ben) == 1001
    assert out(1, headers=ann, end=True) == 16


@pytest.mark.skipif(EXECUTOR != "workers", reason="in process each server process keeps its own sequences")
def test_in_worker_mode_a_sequence_spans_connections_and_transports(model_server):
    """The sequence's state is the worker's: REST and gRPC front-end
    processes, each on new connections, continue one sequence."""
    values = [3, -8, 21, 4, 9]
    got = []
    for i, value in enumerate(values):
        client = client_of(model_server, "http" if i % 2 else "grpc")  # a new connection each time
        got.append(int(send(client, "seq_accumulator", value, "spanning", start=i == 0, end=i == 4)[0][0][0]))
    assert got == np.cumsum(values).tolist()
