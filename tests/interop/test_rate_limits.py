"""Per-team rate limits and in-flight caps against a live server whose
processes (two HTTP workers, the gRPC processes) share the limits through
Redis (database TEST_REDIS_DB): a team over its rate gets 429 with
``Retry-After`` (gRPC RESOURCE_EXHAUSTED with ``retry-after`` metadata)
while another team's requests keep succeeding; a team's own limits set by
an operator (audited); an in-flight cap; anonymous callers' own small
bucket; throttled requests counted per team in the metrics; a request to
an ensemble charged one request per step, refused before any step runs."""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
import uuid

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.conftest import EXECUTOR, TEST_REDIS_URL
from tests.support import onnx_models as m
from tests.support.live import bearer, manage, people_with_tokens, request, upload
from tests.support.repository import _ensemble
from tests.support.server import LiveServer

pytestmark = [
    pytest.mark.interop,
    pytest.mark.skipif(EXECUTOR != "inprocess", reason="limits are the front end's: the executor does not matter"),
]

RATE = 5  # requests per second per team (and the burst)
RUN = uuid.uuid4().hex[:6]  # team names of this run: Redis keys of earlier runs do not count
FLOOD, CALM, SLOW, GUSH = f"flood{RUN}", f"calm{RUN}", f"slow{RUN}", f"gush{RUN}"
STREAM = f"stream{RUN}"
ENS, ENS_GRPC = f"ens{RUN}", f"ensgrpc{RUN}"
#: An ensemble of three steps: plus_one three times (y = x + 3).
CHAIN = _ensemble(
    "chain3",
    '{ name: "X" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
    '{ name: "Y" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
    [("plus_one", -1, {"x": t}, {"y": u}) for t, u in (("X", "a"), ("a", "b"), ("b", "Y"))],
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repository = tmp_path_factory.mktemp("limits-repository")
    m.write_model(repository, "plus_one", m.affine(1.0, 1.0))
    m.write_model(repository, "slow", m.slow_loop())
    (repository / "chain3" / "1").mkdir(parents=True)
    (repository / "chain3" / "config.pbtxt").write_text(CHAIN)
    live = LiveServer(
        repository,
        tmp_path_factory.mktemp("limits-live"),
        extra_env={
            "RATE_LIMIT_REDIS_URL": TEST_REDIS_URL,
            "RATE_LIMIT_TEAM_RPS": str(RATE),
            "RATE_LIMIT_TEAM_BURST": str(RATE),
            "RATE_LIMIT_ANONYMOUS_RPS": "1",
            "RATE_LIMIT_ANONYMOUS_BURST": "3",
        },
    )
    live.start()
    yield live
    assert live.stop() == 0, live.log()


@pytest.fixture(scope="module")
def tokens(server):
    """One member of each team, with an API token (the test's models are operator-owned:
    a call is charged to the caller's only team)."""
    return people_with_tokens(
        server, flooder=FLOOD, steady=CALM, sloth=SLOW, gusher=GUSH, streamer=STREAM, ensembler=ENS,
        ensembler_grpc=ENS_GRPC, limits_ops="superuser"
    )  # fmt: skip


BODY = json.dumps(
    {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]}]}
).encode()


def infer(server, token: str | None, model: str = "plus_one", body: bytes = BODY):
    """(status, Retry-After, answer) of one V2 inference on a new connection."""
    host, port = server.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        headers = {"Content-Type": "application/json", **(bearer(token) if token else {})}
        conn.request("POST", f"/v2/models/{model}/infer", body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.getheader("Retry-After"), json.loads(response.read())
    finally:
        conn.close()


def throttled(server, team: str, limit: str) -> float:
    _status, body = request(server, "GET", "/metrics")
    text = body.decode() if isinstance(body, bytes) else body
    found = re.search(
        r'modelhost_throttled_requests_total\{limit="' + limit + r'",team="' + team + r'"\} ([0-9.e+]+)', text
    )
    return float(found.group(1)) if found else 0.0


def test_a_team_over_its_rate_gets_429_while_another_team_keeps_succeeding(server, tokens):
    answers = {"flood": [], "calm": []}

    def flood():
        for _ in range(60):
            answers["flood"].append(infer(server, tokens["flooder"]))

    thread = threading.Thread(target=flood)
    thread.start()
    time.sleep(0.05)
    while thread.is_alive() or len(answers["calm"]) < 6:  # about 4 requests per second: under the rate
        answers["calm"].append(infer(server, tokens["steady"]))
        time.sleep(0.25)
        if len(answers["calm"]) >= 20:
            break
    thread.join()

    flood_ok = [a for a in answers["flood"] if a[0] == 200]
    refused = [a for a in answers["flood"] if a[0] != 200]
    assert refused and all(status == 429 for status, _, _ in refused), answers["flood"]
    assert all(retry is not None and int(retry) >= 1 for _, retry, _ in refused)
    assert all(f"team {FLOOD} may send {RATE} requests per second" in body["error"] for _, _, body in refused)
    # The burst, and at most the rate on top while the flood lasted (shared by both HTTP processes).
    assert RATE <= len(flood_ok) <= RATE + RATE * 4, len(flood_ok)
    assert all(status == 200 for status, _, _ in answers["calm"]), answers["calm"]
    assert all(body["outputs"][0]["data"] == [2.0, 3.0, 4.0, 5.0] for _, _, body in answers["calm"])
    assert throttled(server, FLOOD, "team_rate") == len(refused)
    assert throttled(server, CALM, "team_rate") == 0


def test_over_the_rate_on_grpc_is_resource_exhausted_with_retry_after(server, tokens):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    inp = grpcclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
    errors = []
    try:
        for _ in range(4 * RATE):
            try:
                client.infer("plus_one", [inp], headers={"authorization": f"Bearer {tokens['gusher']}"})
            except InferenceServerException as exc:
                errors.append(exc)
    finally:
        client.close()
    assert errors and all(e.status() == "StatusCode.RESOURCE_EXHAUSTED" for e in errors)
    assert f"team {GUSH}" in errors[0].message()
    # The retry-after trailing metadata, read with grpc itself.
    channel = grpc.insecure_channel(server.grpc_url)
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc

    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    message = pb.ModelInferRequest(model_name="plus_one")
    tensor = message.inputs.add(name="x", datatype="FP32", shape=[1, 4])
    tensor.contents.fp32_contents.extend([1, 2, 3, 4])
    trailing = None
    for _ in range(4 * RATE):
        try:
            stub.ModelInfer(message, metadata=[("authorization", f"Bearer {tokens['gusher']}")])
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            trailing = dict(exc.trailing_metadata())
            break
    channel.close()
    assert trailing is not None and int(trailing["retry-after"]) >= 1


def test_a_stream_is_admitted_request_by_request(server, tokens):
    """One gRPC ModelStreamInfer call flooding at 10x its team's rate: each
    request is admitted on its own, so about the burst plus the rate runs;
    the others are answered with the rate limit's error (and when to retry),
    and the stream goes on to answer every request."""
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc

    message = pb.ModelInferRequest(model_name="plus_one")
    message.inputs.add(name="x", datatype="FP32", shape=[1, 4]).contents.fp32_contents.extend([1, 2, 3, 4])
    sent = []

    def requests():
        start = time.monotonic()
        while time.monotonic() - start < 1.5:
            sent.append(time.monotonic())
            yield message
            time.sleep(0.01)

    channel = grpc.insecure_channel(server.grpc_url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    try:
        answers = list(stub.ModelStreamInfer(requests(), metadata=[("authorization", f"Bearer {tokens['streamer']}")]))
    finally:
        channel.close()
    elapsed = sent[-1] - sent[0]
    assert len(answers) == len(sent) >= 10 * RATE * elapsed
    admitted = [a for a in answers if not a.error_message]
    refused = [a.error_message for a in answers if a.error_message]
    assert RATE <= len(admitted) <= RATE + RATE * elapsed + 1, (len(admitted), len(answers))
    assert all(
        np.frombuffer(a.infer_response.raw_output_contents[0], np.float32).tolist() == [2, 3, 4, 5] for a in admitted
    )
    assert all(f"team {STREAM} may send {RATE} requests per second" in e and "(retry after" in e for e in refused)
    assert throttled(server, STREAM, "team_rate") == len(refused)


def test_a_teams_own_limits_set_by_an_operator_are_audited(server, tokens):
    output = manage(server, "set_team_limits", CALM, "--rate", "100", "--burst", "40")
    assert f"team {CALM}: rate 100/s, burst 40" in output
    statuses = [infer(server, tokens["steady"])[0] for _ in range(30)]
    assert statuses == [200] * 30  # above the default of 5 per second: its own limit applies
    output = manage(server, "shell", "-c", "from models_store.models import AuditEvent as A; "
                    "e = A.objects.filter(action='team.limits').latest('id'); print(e.actor_name, e.detail)")  # fmt: skip
    assert "system" in output and f"'team': '{CALM}'" in output and "'rate': 100.0" in output


def test_an_in_flight_cap(server, tokens):
    manage(server, "set_team_limits", SLOW, "--rate", "0", "--in-flight", "1")
    slow = json.dumps(
        {
            "inputs": [
                {"name": "x", "shape": [1, 256], "datatype": "FP32", "data": [0.1] * 256},
                {"name": "n", "shape": [], "datatype": "INT64", "data": [40000]},
            ]
        }
    ).encode()
    small = json.dumps(
        {
            "inputs": [
                {"name": "x", "shape": [1, 256], "datatype": "FP32", "data": [0.1] * 256},
                {"name": "n", "shape": [], "datatype": "INT64", "data": [1]},
            ]
        }
    ).encode()
    assert infer(server, tokens["sloth"], "slow", small)[0] == 200  # loaded; the team's limits followed
    first: list = []
    thread = threading.Thread(target=lambda: first.append(infer(server, tokens["sloth"], "slow", slow)))
    thread.start()  # runs about 1.5 s
    refused = []
    while thread.is_alive() and not refused:  # a second one while the first runs
        time.sleep(0.1)
        answer = infer(server, tokens["sloth"], "slow", small)
        if answer[0] != 200:
            refused.append(answer)
    thread.join()
    assert first[0][0] == 200
    status, retry, body = refused[0]
    assert status == 429 and retry == "1" and f"team {SLOW} may have 1 inferences in flight" in body["error"]
    assert infer(server, tokens["sloth"], "slow", small)[0] == 200  # the slot was released
    assert throttled(server, SLOW, "team_in_flight") == 1


def _inferences(server, model: str) -> int:
    status, body = request(server, "GET", f"/v2/models/{model}/stats")
    assert status == 200, body
    return sum(int(s["inference_count"]) for s in body["model_stats"])


def test_a_request_to_an_ensemble_costs_one_request_per_step(server, tokens):
    """A flood of requests to a 3-step ensemble for 1.5 s by a team of 5
    requests per second (bursts of 5): at most (5 + 5 x the time) / 3 are
    admitted (before: the team's rate in requests, 3 inferences each);
    each runs its 3 steps, the refused ones none (the composing model's
    statistics count exactly 3 per admitted request); every refusal is a
    429 with Retry-After, counted in the metrics."""
    before = _inferences(server, "plus_one")
    answers = []
    start = time.monotonic()
    while time.monotonic() - start < 1.5:
        answers.append(infer(server, tokens["ensembler"], "chain3", BODY.replace(b'"x"', b'"X"')))
    elapsed = time.monotonic() - start
    admitted = [body for status, _, body in answers if status == 200]
    refused = [(status, retry, body) for status, retry, body in answers if status != 200]
    assert all(body["outputs"][0]["data"] == [4.0, 5.0, 6.0, 7.0] for body in admitted)
    assert 1 <= len(admitted) <= (RATE + RATE * elapsed) / 3 + 1, (len(admitted), elapsed)
    assert refused and all(status == 429 and int(retry) >= 1 for status, retry, _ in refused)
    messages = [body["error"] for _, _, body in refused]
    assert all(f"team {ENS} may send {RATE} requests per second" in e for e in messages)
    assert any("a request to ensemble 'chain3' (3 steps) costs 3 requests" in e for e in messages)
    assert _inferences(server, "plus_one") - before == 3 * len(admitted)
    assert throttled(server, ENS, "team_rate") == len(refused)


def test_an_ensemble_over_the_rate_on_grpc_is_resource_exhausted(server, tokens):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    inp = grpcclient.InferInput("X", [1, 4], "FP32")
    inp.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
    errors, outputs = [], []
    try:
        for _ in range(2 * RATE):
            try:
                result = client.infer("chain3", [inp], headers={"authorization": f"Bearer {tokens['ensembler_grpc']}"})
                outputs.append(result.as_numpy("Y").tolist())
            except InferenceServerException as exc:
                errors.append(exc)
    finally:
        client.close()
    assert outputs and all(o == [[4.0, 4.0, 4.0, 4.0]] for o in outputs)
    assert errors and all(e.status() == "StatusCode.RESOURCE_EXHAUSTED" for e in errors)
    assert any("a request to ensemble 'chain3' (3 steps) costs 3 requests" in e.message() for e in errors)


def test_anonymous_callers_share_their_own_small_bucket(server, tokens):
    statuses = [infer(server, None)[0] for _ in range(8)]
    assert statuses[:3] == [200, 200, 200] and 429 in statuses[3:]
    assert throttled(server, "anonymous", "anonymous_rate") == statuses.count(429)
    assert infer(server, tokens["steady"])[0] == 200  # a token is not anonymous


# -- every caller is charged to a bucket (issue 22, F12) ---------------------------------
OWNER, LEFT, RIGHT = f"owner{RUN}", f"left{RUN}", f"right{RUN}"
FLOOD_SECONDS = 1.5
TRANSPORTS = ("rest", "grpc", "tfserving")
CALLERS = ("two_teams", "no_team")
MODELS = ("plus_one", "theirs")  # operator-owned; another team's


@pytest.fixture(scope="module")
def own_bucket_tokens(server):
    """A token for each (transport, caller, model) case, each of its own user
    (so the cases do not share a bucket): a user in two teams (LEFT and RIGHT,
    neither owning the models) or in none; and team OWNER's model "theirs"."""
    people = {
        f"{c}_{t}_{m}": ((LEFT, RIGHT) if c == "two_teams" else "") for t in TRANSPORTS for c in CALLERS for m in MODELS
    }
    tokens = people_with_tokens(server, owner=OWNER, **people)
    status, answer = upload(server, tokens["owner"], "theirs", m.affine(1.0, 1.0), OWNER)
    assert status == 201, answer
    return tokens


def _send_http(server, token, path: str, body: bytes, output):
    """A function sending one request on a kept-alive connection: (status,
    error, ``output(answer)``); and the function closing the connection."""
    host, port = server.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    headers = {"Content-Type": "application/json", **bearer(token)}

    def send():
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        answer = json.loads(response.read())
        return response.status, answer.get("error", ""), output(answer) if response.status == 200 else None

    return send, conn.close


def _send_rest(server, token, model):
    return _send_http(server, token, f"/v2/models/{model}/infer", BODY, lambda a: a["outputs"][0]["data"])


def _send_tfserving(server, token, model):
    body = json.dumps({"instances": [[1.0, 2.0, 3.0, 4.0]]}).encode()
    return _send_http(server, token, f"/v1/models/{model}:predict", body, lambda a: a["predictions"][0])


def _send_grpc(server, token, model):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    inp = grpcclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32))
    headers = {"authorization": f"Bearer {token}"}

    def send():
        try:
            result = client.infer(model, [inp], headers=headers)
        except InferenceServerException as exc:
            return exc.status(), exc.message(), None
        return "OK", "", result.as_numpy("y").ravel().tolist()

    return send, client.close


SENDERS = {"rest": _send_rest, "grpc": _send_grpc, "tfserving": _send_tfserving}
ALLOWED = {"rest": 200, "grpc": "OK", "tfserving": 200}
REFUSED = {"rest": 429, "grpc": "StatusCode.RESOURCE_EXHAUSTED", "tfserving": 429}


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_token_with_no_team_to_charge_is_held_to_the_team_limit(server, own_bucket_tokens, transport, caller, model):
    """The attack of F12: a token of a user in two teams (neither owning the
    model), or of a user in no team, sending at 10x the team limit, on an
    operator-owned model and on another team's model. Before, every request
    answered 200 (no bucket charged them); now the user's own bucket, under
    the team defaults, admits about the limit and refuses the excess."""
    user = f"{caller}_{transport}_{model}"
    send, close = SENDERS[transport](server, own_bucket_tokens[user], model)
    answers = []
    start = time.monotonic()
    try:
        while time.monotonic() - start < FLOOD_SECONDS:
            answers.append(send())
    finally:
        close()
    elapsed = time.monotonic() - start
    allowed = [a for a in answers if a[0] == ALLOWED[transport]]
    print(f"{transport} {caller} {model}: {len(answers)} requests in {elapsed:.2f} s, {len(allowed)} admitted")
    assert len(answers) / elapsed >= 10 * RATE, f"only {len(answers) / elapsed:.0f} req/s: not a flood"
    refused = [a for a in answers if a[0] != ALLOWED[transport]]
    assert all(status == REFUSED[transport] for status, _, _ in refused), refused[:3]
    assert all(f"user {user} (no team of theirs owns this model) may send {RATE} requests" in e for _, e, _ in refused)
    # The burst, then the rate while the flood lasted (shared by every process through Redis).
    assert RATE <= len(allowed) <= RATE + RATE * elapsed + 1, (len(allowed), len(answers), elapsed)
    assert all(out == [2.0, 3.0, 4.0, 5.0] for _, _, out in allowed)  # y = x + 1, computed
    assert throttled(server, "", "user_rate") >= len(refused)
