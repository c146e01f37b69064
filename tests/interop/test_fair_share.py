"""One team cannot hurt another (inference/admission/fair_share.py), against a live
server with one HTTP process and one gRPC process (so that every request of
a test meets at one gate), in process and in worker mode (one CPU worker
over mutual TLS): a team's burst of calls queued at a model's only instance
does not come before another team's call, which is served at the next
turn; a flood of one team's calls to its own model leaves the other team's
calls all answered, with the right values; a flow over its queue bound is
refused 429 / RESOURCE_EXHAUSTED with Retry-After."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
import time
import uuid

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from tests.conftest import TEST_REDIS_URL
from tests.support import onnx_models as m
from tests.support.live import bearer, people_with_tokens
from tests.support.server import serve_live

pytestmark = pytest.mark.interop

WIDTH = 64
SLOW = 10000  # loop iterations of the shared model: about 30 ms per request here
RUN = uuid.uuid4().hex[:6]
TEAM_A, TEAM_B = f"burst{RUN}", f"calm{RUN}"


@pytest.fixture(scope="module", params=["inprocess", "workers"])
def server(request, tmp_path_factory):
    repository = tmp_path_factory.mktemp("fair-repository")
    for name in ("shared", "a_model", "b_model"):
        m.write_model(repository, name, m.slow_loop(WIDTH))
    env = {
        "HTTP_WORKERS": "1",
        "GRPC_PROCESSES": "1",
        "FAIR_QUEUE_PER_FLOW": "40",
        "REQUEST_LOG_LEVEL": "WARNING",
    }
    workers = TEST_REDIS_URL if request.param == "workers" else None
    lifetime = serve_live(repository, tmp_path_factory.mktemp(f"fair-live-{request.param}"), env, workers)
    live = next(lifetime)
    live.mode = request.param
    yield live
    next(lifetime, None)


@pytest.fixture(scope="module")
def tokens(server):
    """A member of each team with a token (the models are operator-owned: a call is charged to the caller's team)."""
    return people_with_tokens(server, burster=TEAM_A, steady=TEAM_B)


def _inputs(module, x: np.ndarray, n: int):
    tx = module.InferInput("x", list(x.shape), "FP32")
    tx.set_data_from_numpy(x)
    tn = module.InferInput("n", [], "INT64")
    tn.set_data_from_numpy(np.array(n, np.int64))
    return [tx, tn]


def test_another_teams_call_is_served_at_the_next_turn_not_after_a_burst(server, tokens):
    """Team A queues 24 calls at the shared model's only instance (gRPC, one
    process: one gate); team B's one call, sent once they wait, completes
    before all but a few of them (without fair turns: after all 24)."""
    x = np.full((1, WIDTH), 0.5, np.float32)
    order: list[str] = []

    async def scenario():
        a = grpcaio.InferenceServerClient(server.grpc_url)
        b = grpcaio.InferenceServerClient(server.grpc_url)
        head_a = {"authorization": f"Bearer {tokens['burster']}"}
        head_b = {"authorization": f"Bearer {tokens['steady']}"}
        await b.infer("shared", _inputs(grpcaio, x, 1), headers=head_b)  # connected and loaded

        async def call(who, client, headers):
            result = await client.infer("shared", _inputs(grpcaio, x, SLOW), headers=headers)
            order.append(who)
            return result.as_numpy("y")

        burst = [asyncio.create_task(call("a", a, head_a)) for _ in range(24)]
        while len(order) < 2:  # all 24 were sent at once: the rest wait at the gate by now
            await asyncio.sleep(0.005)
        sent = len(order)  # a's calls answered before b's was sent
        mine = await call("b", b, head_b)
        answers = await asyncio.gather(*burst)
        await a.close()
        await b.close()
        return mine, answers, sent

    mine, answers, sent = asyncio.run(scenario())
    expected = m.slow_loop_expected(x, SLOW, WIDTH)
    np.testing.assert_allclose(mine, expected, rtol=1e-4, atol=1e-5)
    for y in answers:
        np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)
    overtaken = order.index("b") - sent  # a's calls answered between b's call and its answer
    assert 24 - sent >= 8, order  # b came while most of a's burst still waited
    # Fair turns: the call running when b's arrives, and those b's call was still travelling behind (a
    # loaded machine delays it by a few 30 ms runs); without fair turns: every one of them (22 of 24).
    assert overtaken <= 6, order


def test_a_flood_of_one_team_leaves_the_others_calls_all_answered(server, tokens):
    """Team A floods its own model with 150 gRPC calls in flight (each sent
    again when answered) for 3 s; team B's REST and gRPC calls to its own
    model meanwhile all succeed with the right values. A's calls are served
    or refused RESOURCE_EXHAUSTED (its flow's queue holds 40), never
    UNAVAILABLE or INTERNAL."""
    x = np.random.default_rng(3).standard_normal((1, WIDTH)).astype(np.float32)
    expected = m.slow_loop_expected(x, 20, WIDTH)
    statuses: dict[str, int] = {}
    stop = time.monotonic() + 3.0

    async def flood():
        client = grpcaio.InferenceServerClient(server.grpc_url)
        headers = {"authorization": f"Bearer {tokens['burster']}"}
        inputs = _inputs(grpcaio, x, 200)

        async def one():
            while time.monotonic() < stop:
                try:
                    await client.infer("a_model", inputs, headers=headers)
                    statuses["OK"] = statuses.get("OK", 0) + 1
                except InferenceServerException as exc:
                    key = str(exc.status())
                    statuses[key] = statuses.get(key, 0) + 1

        await asyncio.gather(*(one() for _ in range(150)))
        await client.close()

    flooding = threading.Thread(target=asyncio.run, args=(flood(),))
    flooding.start()
    b_results = []
    grpc_b = grpcclient.InferenceServerClient(server.grpc_url)
    host, port = server.http_url.split(":")
    body = json.dumps(
        {
            "inputs": [
                {"name": "x", "shape": [1, WIDTH], "datatype": "FP32", "data": x.ravel().tolist()},
                {"name": "n", "shape": [], "datatype": "INT64", "data": [20]},
            ]
        }
    )
    time.sleep(0.3)
    while time.monotonic() < stop:
        result = grpc_b.infer(
            "b_model", _inputs(grpcclient, x, 20), headers={"authorization": f"Bearer {tokens['steady']}"}
        )
        b_results.append(result.as_numpy("y"))
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request(
            "POST", "/v2/models/b_model/infer", body, {"Content-Type": "application/json", **bearer(tokens["steady"])}
        )
        answer = conn.getresponse()
        assert answer.status == 200, answer.read()
        data = json.loads(answer.read())
        conn.close()
        b_results.append(np.array(data["outputs"][0]["data"], np.float32).reshape(1, WIDTH))
        time.sleep(0.02)
    flooding.join(30)
    assert len(b_results) >= 10
    for y in b_results:
        np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)
    assert statuses.get("OK", 0) > 0, statuses
    assert set(statuses) <= {"OK", "StatusCode.RESOURCE_EXHAUSTED"}, statuses


def test_a_flow_over_its_queue_bound_gets_429_with_retry_after(server, tokens):
    """60 REST calls of one team at once to the shared model (one HTTP
    process: 4 work slots, one instance): the ones over its flow's bounds are
    refused 429 with Retry-After and a message naming the team; the rest are
    answered 200."""
    x = np.full((1, WIDTH), 0.25, np.float32)
    body = json.dumps(
        {
            "inputs": [
                {"name": "x", "shape": [1, WIDTH], "datatype": "FP32", "data": x.ravel().tolist()},
                {"name": "n", "shape": [], "datatype": "INT64", "data": [SLOW]},
            ]
        }
    )
    host, port = server.http_url.split(":")
    answers = []
    lock = threading.Lock()

    def call():
        conn = http.client.HTTPConnection(host, int(port), timeout=120)
        conn.request(
            "POST", "/v2/models/shared/infer", body, {"Content-Type": "application/json", **bearer(tokens["burster"])}
        )
        response = conn.getresponse()
        with lock:
            answers.append((response.status, response.getheader("Retry-After"), json.loads(response.read())))
        conn.close()

    threads = [threading.Thread(target=call) for _ in range(60)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    statuses = sorted({status for status, _, _ in answers})
    assert statuses == [200, 429], statuses
    expected = m.slow_loop_expected(x, SLOW, WIDTH)
    for status, retry_after, answer in answers:
        if status == 200:
            np.testing.assert_allclose(
                np.array(answer["outputs"][0]["data"], np.float32), expected.ravel(), rtol=1e-4, atol=1e-5
            )
        else:
            assert int(retry_after) >= 1
            assert f"team {TEAM_A} already has" in answer["error"], answer
