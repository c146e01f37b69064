"""Dynamic batching as a client sees it (Triton's semantics and config
fields), in process and in worker mode: concurrent batch-1 requests run
together, every answer is what ONNX Runtime computes for that request alone,
and the statistics extension counts inferences and executions as Triton does.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import onnx_models as m
from tests.support.live import wait_for

pytestmark = pytest.mark.interop

TABLE = np.array([0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5], dtype=np.float32)


def _stats(http, model: str) -> dict:
    (stats,) = http.get_inference_statistics(model)["model_stats"]
    return stats


def _reference(payload: bytes):
    """ONNX Runtime on the same model, in the test: the unbatched answer."""
    session = ort.InferenceSession(payload, providers=["CPUExecutionProvider"])
    return lambda **feeds: session.run(None, feeds)[0]


def test_config_endpoint_and_model_metadata_show_dynamic_batching(model_server):
    http = httpclient.InferenceServerClient(model_server.http_url)
    config = http.get_model_config("batched")
    assert config["max_batch_size"] == 8
    assert config["dynamic_batching"] == {
        "preferred_batch_size": [8],  # Triton's normalization of an empty list: max_batch_size
        "max_queue_delay_microseconds": 20000,
        "preserve_ordering": False,
        "priority_levels": 0,
        "default_priority_level": 0,
        "priority_queue_policy": {},
    }
    assert "dynamic_batching" not in http.get_model_config("simple")  # off unless the config asks, as in Triton
    grpc_config = grpcclient.InferenceServerClient(model_server.grpc_url).get_model_config("batched").config
    assert grpc_config.dynamic_batching.max_queue_delay_microseconds == 20000


def test_concurrent_batch_one_requests_run_together(model_server):
    """8 clients x 10 batch-1 requests: each answer equals ONNX Runtime's for
    that request alone; executions are at most half of the inferences."""
    reference = _reference(m.affine(3.0, -1.0))
    http = httpclient.InferenceServerClient(model_server.http_url)
    before = _stats(http, "batched")
    rng = np.random.default_rng(7)
    inputs = [rng.standard_normal((1, 4)).astype(np.float32) for _ in range(80)]
    barrier = threading.Barrier(8)

    def client(k: int):
        rest = httpclient.InferenceServerClient(model_server.http_url)
        grpc_c = grpcclient.InferenceServerClient(model_server.grpc_url)
        barrier.wait()
        for i in range(k, 80, 8):
            module, c = (httpclient, rest) if i % 2 else (grpcclient, grpc_c)
            inp = module.InferInput("x", [1, 4], "FP32")
            inp.set_data_from_numpy(inputs[i])
            got = c.infer("batched", [inp]).as_numpy("y")
            np.testing.assert_allclose(got, reference(x=inputs[i]), rtol=1e-6)
        return k

    with ThreadPoolExecutor(8) as pool:
        assert sorted(pool.map(client, range(8))) == list(range(8))

    def counted():
        now = _stats(http, "batched")
        return now if int(now["inference_count"]) - int(before["inference_count"]) == 80 else None

    assert wait_for(lambda: counted() is not None, timeout=10)
    after = counted()
    executions = int(after["execution_count"]) - int(before["execution_count"])
    assert 1 <= executions <= 40, executions
    sizes = {b["batch_size"]: int(b["compute_infer"]["count"]) for b in after["batch_stats"]}
    assert max(sizes) >= 2 and max(sizes) <= 8
    assert sum(size * count for size, count in sizes.items()) >= 80  # every inference ran in some execution


def test_requests_of_other_shapes_batch_apart_and_over_max_batch_size_is_refused(model_server):
    """[N, K] inputs with K of 2 and 3 and N from 1 to 3, sent at once: each
    answer is the table lookup of its own indices; a batch of 9 rows is 400."""
    http = httpclient.InferenceServerClient(model_server.http_url)
    rng = np.random.default_rng(3)
    requests = [rng.integers(0, 10, size=(n, k), dtype=np.int64) for n in (1, 2, 3) for k in (2, 3) for _ in range(2)]

    def one(idx):
        inp = httpclient.InferInput("idx", list(idx.shape), "INT64")
        inp.set_data_from_numpy(idx)
        return httpclient.InferenceServerClient(model_server.http_url).infer("batched_gather", [inp]).as_numpy("y")

    with ThreadPoolExecutor(len(requests)) as pool:
        for idx, got in zip(requests, pool.map(one, requests)):
            np.testing.assert_array_equal(got, TABLE[idx])
    stats = _stats(http, "batched_gather")
    assert all(b["batch_size"] <= 8 for b in stats["batch_stats"])
    too_many = httpclient.InferInput("idx", [9, 2], "INT64")
    too_many.set_data_from_numpy(np.zeros((9, 2), dtype=np.int64))
    with pytest.raises(InferenceServerException) as info:
        http.infer("batched_gather", [too_many])
    assert info.value.status() == "400" and "max_batch_size 8" in info.value.message()


def test_a_deadline_that_passes_in_the_batch_queue_is_not_run(model_server):
    """A 2 s batching window and a 200 ms timeout: DEADLINE_EXCEEDED (504),
    and the model never ran for it."""
    http = httpclient.InferenceServerClient(model_server.http_url)
    before = _stats(http, "batched_slow")
    inp = httpclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
    with pytest.raises(InferenceServerException) as info:
        http.infer("batched_slow", [inp], timeout=200_000)  # microseconds, as Triton
    assert info.value.status() == "504", info.value.message()
    ok = http.infer("batched_slow", [_fp32("x", np.array([[1, 2, 3, 4]], dtype=np.float32))])
    np.testing.assert_allclose(ok.as_numpy("y"), [[1, 2, 3, 4]])  # waits out the window, then runs alone

    def delta(stats, *path):
        for key in path:
            stats = stats[key]
        return int(stats)

    def settled():  # counts of every process reach the database within a flush interval
        after = _stats(http, "batched_slow")
        fails = delta(after, "inference_stats", "fail", "count") - delta(before, "inference_stats", "fail", "count")
        runs = delta(after, "execution_count") - delta(before, "execution_count")
        return (fails, runs) == (1, 1)

    assert wait_for(settled, timeout=10)  # one failure, one execution: the expired request never ran


def _fp32(name: str, array: np.ndarray):
    inp = httpclient.InferInput(name, list(array.shape), "FP32")
    inp.set_data_from_numpy(array)
    return inp
