"""gRPC ``ModelStreamInfer`` (Triton's bidirectional streaming) driven as
Triton's clients drive it: ``tritonclient.grpc``'s ``start_stream`` /
``async_stream_infer``, ``tritonclient.grpc.aio``'s ``stream_infer``, the
raw stub, and ``perf_analyzer --streaming``; in process and, with
MODELHOST_TEST_EXECUTOR=workers, through a worker. Expected values are
computed with numpy."""

from __future__ import annotations

import queue
import re
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aiogrpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from tests.interop.test_extensions import PERF_ANALYZER
from tests.support import stalls
from tests.support.live import run_coroutine, wait_for

pytestmark = pytest.mark.interop


class Stream:
    """A tritonclient.grpc stream whose answers are collected in order."""

    def __init__(self, url: str, headers: dict | None = None):
        self.client = grpcclient.InferenceServerClient(url)
        self.answers: queue.Queue = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.answers.put((result, error)), headers=headers)

    def send(self, model: str, inputs, request_id: str, **kwargs) -> None:
        self.client.async_stream_infer(model, inputs, request_id=request_id, **kwargs)

    def take(self, count: int, timeout: float = 30) -> list:
        return [self.answers.get(timeout=timeout) for _ in range(count)]

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()


def _simple(a: np.ndarray, b: np.ndarray) -> list:
    inputs = [
        grpcclient.InferInput("INPUT0", list(a.shape), "INT32"),
        grpcclient.InferInput("INPUT1", list(b.shape), "INT32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def _affine(x: np.ndarray) -> list:
    inp = grpcclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return [inp]


def test_many_requests_on_one_stream_each_answered_in_order_and_an_error_does_not_end_it(model_server):
    """60 requests on two models; request 20 has a wrong shape and request
    40 names an unknown model: those two are answered with their error and
    their id, every other one with what numpy computes, all in order."""
    rng = np.random.default_rng(3)
    stream = Stream(model_server.grpc_url)
    expected = {}
    try:
        for i in range(60):
            rid = f"r{i}"
            if i == 20:
                stream.send("simple", _simple(np.zeros((1, 8), np.int32), np.zeros((1, 8), np.int32)), rid)
            elif i == 40:
                stream.send("wrong_model_name", _affine(np.zeros((1, 4), np.float32)), rid)
            elif i % 2:
                a, b = (rng.integers(-1000, 1000, (1, 16), dtype=np.int32) for _ in range(2))
                stream.send("simple", _simple(a, b), rid)
                expected[rid] = ("simple", a + b, a - b)
            else:
                x = rng.standard_normal((2, 4)).astype(np.float32)
                stream.send("affine", _affine(x), rid)
                expected[rid] = ("affine", 2 * x + 1)
        answers = stream.take(60)
    finally:
        stream.close()
    for i, (result, error) in enumerate(answers):
        rid = f"r{i}"
        if i in (20, 40):
            assert result is None and error is not None, i
            if i == 20:
                assert "input 'INPUT0' has shape [1, 8]" in error.message(), error.message()
            else:
                assert error.message().startswith("Request for unknown model: 'wrong_model_name' is not found")
            continue
        assert error is None, (i, error)
        response = result.get_response()
        assert response.id == rid and response.model_version == "1"
        assert response.parameters["triton_final_response"].bool_param is True
        model, *values = expected[rid]
        assert response.model_name == model
        if model == "simple":
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values[0])
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), values[1])
        else:
            np.testing.assert_allclose(result.as_numpy("y"), values[0], rtol=1e-6)


def test_the_error_answer_names_the_request_that_failed(model_server):
    """On the wire, as Triton answers: ``error_message``, and an
    ``infer_response`` holding only the request's id, model name and version."""
    channel = grpcclient.grpc.insecure_channel(model_server.grpc_url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    bad = pb.ModelInferRequest(model_name="simple", model_version="1", id="bad-one")
    bad.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16]).contents.int_contents.extend(range(16))
    good = pb.ModelInferRequest(model_name="affine", id="good-one")
    good.inputs.add(name="x", datatype="FP32", shape=[1, 4]).contents.fp32_contents.extend([1, 2, 3, 4])
    try:
        answers = list(stub.ModelStreamInfer(iter([bad, good]), timeout=30))
    finally:
        channel.close()
    assert len(answers) == 2
    assert answers[0].error_message == (
        "expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], "
        "but missing required input(s) ['INPUT1']. Please provide all required input(s)."
    )
    failed = answers[0].infer_response
    assert (failed.id, failed.model_name, failed.model_version, len(failed.outputs)) == ("bad-one", "simple", "1", 0)
    assert answers[1].error_message == ""
    y = np.frombuffer(answers[1].infer_response.raw_output_contents[0], dtype=np.float32)
    np.testing.assert_array_equal(y, 2 * np.array([1, 2, 3, 4], np.float32) + 1)


def test_requests_of_one_stream_run_together_and_a_batching_model_batches_them(model_server):
    """16 batch-1 requests sent at once on one stream to the dynamically
    batched model (20 ms window): answered in order, each its own value, in
    fewer executions than requests (one at a time would take 16)."""
    http = httpclient.InferenceServerClient(model_server.http_url)
    (before,) = http.get_inference_statistics("batched")["model_stats"]
    xs = [np.full((1, 4), i, dtype=np.float32) for i in range(16)]
    stream = Stream(model_server.grpc_url)
    try:
        for i, x in enumerate(xs):
            stream.send("batched", _affine(x), f"b{i}")
        answers = stream.take(16)
    finally:
        stream.close()
    for i, (result, error) in enumerate(answers):
        assert error is None, error
        assert result.get_response().id == f"b{i}"
        np.testing.assert_allclose(result.as_numpy("y"), 3 * xs[i] - 1)

    seen = {}

    def counted():
        (seen["after"],) = http.get_inference_statistics("batched")["model_stats"]
        return seen["after"]["inference_count"] - before["inference_count"] == 16

    assert wait_for(counted, timeout=10), (before, seen)
    executions = seen["after"]["execution_count"] - before["execution_count"]
    assert executions < 16, executions


def test_a_timeout_bounds_one_request_of_the_stream(model_server):
    """``timeout`` (microseconds) bounds its own request: about 4 s of work
    with 50 ms is DEADLINE_EXCEEDED; the next request, without one, runs."""
    slow = [grpcclient.InferInput("x", [1, 256], "FP32"), grpcclient.InferInput("n", [], "INT64")]
    slow[0].set_data_from_numpy(np.full((1, 256), 0.5, dtype=np.float32))
    slow[1].set_data_from_numpy(np.array(1_000_000, dtype=np.int64))
    stream = Stream(model_server.grpc_url)
    try:
        stream.send("slow", slow, "bounded", timeout=50_000)
        stream.send("affine", _affine(np.ones((1, 4), np.float32)), "after")
        (first, second) = stream.take(2, timeout=10)
    finally:
        stream.close()
    assert first[0] is None and "deadline" in first[1].message(), first
    assert second[1] is None and second[0].get_response().id == "after"
    np.testing.assert_array_equal(second[0].as_numpy("y"), np.full((1, 4), 3.0, np.float32))


def test_triton_grpc_error_mode_ends_the_stream_with_the_error_status(model_server):
    """Triton's opt-in ``triton_grpc_error: true`` header: the first error
    ends the stream with its gRPC status instead of an error message."""
    stream = Stream(model_server.grpc_url, headers={"triton_grpc_error": "true"})
    try:
        stream.send("affine", _affine(np.zeros((1, 4), np.float32)), "ok")
        stream.send("affine", _affine(np.zeros((1, 5), np.float32)), "bad")
        (ok, bad) = stream.take(2)
    finally:
        stream.close()
    assert ok[1] is None and ok[0].get_response().id == "ok"
    assert bad[0] is None and bad[1].status() == "StatusCode.INVALID_ARGUMENT", bad
    assert "input 'x' has shape [1, 5]" in bad[1].message()


def test_the_aio_client_streams(model_server):
    """tritonclient.grpc.aio's ``stream_infer`` (the client of Triton's aio
    stream examples): requests from an async iterator, answers in order."""

    async def run():
        async with aiogrpcclient.InferenceServerClient(model_server.grpc_url) as client:

            async def requests():
                for i in range(5):
                    inp = aiogrpcclient.InferInput("x", [1, 4], "FP32")
                    inp.set_data_from_numpy(np.full((1, 4), i, np.float32))
                    yield {"model_name": "affine", "inputs": [inp], "request_id": str(i)}

            return [answer async for answer in client.stream_infer(requests())]

    answers = run_coroutine(run())
    assert [result.get_response().id for result, error in answers] == ["0", "1", "2", "3", "4"]
    for i, (result, error) in enumerate(answers):
        assert error is None
        np.testing.assert_array_equal(result.as_numpy("y"), np.full((1, 4), 2 * i + 1, np.float32))


def test_perf_analyzer_streams(model_server):
    """``perf_analyzer --streaming``: every request over gRPC streams, at
    concurrency 2, counted by the statistics extension."""
    assert PERF_ANALYZER.exists(), "run `make test-tools` (scripts/install_perf_analyzer.sh)"
    done = stalls.run(
        [str(PERF_ANALYZER), "-m", "stream_probe", "-u", model_server.grpc_url, "-i", "grpc", "--streaming",
         "-b", "2", "--concurrency-range", "2", "--measurement-mode", "count_windows",
         "--measurement-request-count", "200", "--stability-percentage", "500", "--max-trials", "20"],
        120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert float(re.search(r"throughput: ([\d.]+) infer/sec", done.stdout).group(1)) > 0
    server_count = int(re.search(r"Inference count: (\d+)", done.stdout).group(1))
    execution_count = int(re.search(r"Execution count: (\d+)", done.stdout).group(1))
    assert server_count == 2 * execution_count > 0


def test_a_client_that_goes_away_mid_stream_leaves_the_server_serving(model_server):
    """A stream cancelled while its requests run (three of about 1 s each):
    the server stays ready and answers the next stream at once; nothing
    unexpected is logged."""
    slow = [grpcclient.InferInput("x", [1, 256], "FP32"), grpcclient.InferInput("n", [], "INT64")]
    slow[0].set_data_from_numpy(np.full((1, 256), 0.5, dtype=np.float32))
    slow[1].set_data_from_numpy(np.array(50_000, dtype=np.int64))
    client = grpcclient.InferenceServerClient(model_server.grpc_url)
    client.start_stream(callback=lambda result, error: None)
    for i in range(3):
        client.async_stream_infer("slow", slow, request_id=str(i))
    time.sleep(0.2)
    client.stop_stream(cancel_requests=True)
    client.close()
    stream = Stream(model_server.grpc_url)
    try:
        stream.send("affine", _affine(np.ones((1, 4), np.float32)), "next")
        ((result, error),) = stream.take(1, timeout=10)
    finally:
        stream.close()
    assert error is None and result.get_response().id == "next"
    assert "unexpected error" not in model_server.log()
