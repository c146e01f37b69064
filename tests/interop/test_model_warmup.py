"""``model_warmup`` runs at load, as Triton runs it (issue 40 item 6), in
process and in a CPU worker: a log line per sample run, on every model
instance, ``count`` times; a zero sample per preferred batch size the config
does not cover; a failing sample fails the load (503 naming it) and the
model serves nothing; answers after warm-up are exact (tritonclient)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import onnx_models as m
from tests.support import redis_db
from tests.support.server import serve_live

WARM = """max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
dynamic_batching { preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 100 }
model_warmup [
  { name: "zeros" batch_size: 2 count: 3
    inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } },
  { name: "noise" batch_size: 1 inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } } },
  { name: "none" batch_size: 0 inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } }
]
"""
#: A sample that names an input the model does not have (so not its x): Triton fails the load.
BAD = """max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
model_warmup [ { name: "wrong" batch_size: 1 inputs { key: "z" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]
"""


@pytest.fixture(scope="module", params=["inprocess", "workers"])
def server(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("warmup-repo")
    m.write_model(root, "warm", m.affine(3.0, 1.0), config=WARM)
    m.write_model(root, "badwarm", m.affine(1.0, 0.0), config=BAD)
    redis_url = redis_db.url("TEST_WARMUP_REDIS_DB", 11) if request.param == "workers" else None
    yield from serve_live(root, tmp_path_factory.mktemp(f"warmup-{request.param}"), {}, redis_url)


def _log(server) -> str:
    return server.worker_log_path("cpu").read_text() if server.devices else server.log()


def test_model_warmup_runs_at_load_on_every_instance(server):
    http = httpclient.InferenceServerClient(server.http_url)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    inp = httpclient.InferInput("x", [2, 4], "FP32")
    inp.set_data_from_numpy(x)
    np.testing.assert_allclose(http.infer("warm", [inp]).as_numpy("y"), 3 * x + 1)
    log = _log(server)
    ran = re.findall(
        r"model 'warm'[^:]*: warm-up sample '(\w+)' \((\d) of 4, batch size (\d)\) iteration (\d) ran", log
    )
    # 2 instances x (zeros 3 times + noise once + preferred batch size 4 once: 2 is covered by "zeros")
    assert sorted(ran) == sorted(
        [("zeros", "1", "2", str(i)) for i in (1, 2, 3)] * 2
        + [("noise", "2", "1", "1")] * 2
        + [("preferred_batch_size_4", "4", "4", "1")] * 2
    ), log
    assert log.count("skipping batch 0 warm-up sample 'none'") == 2
    load = re.search(r"loaded warm/1 \(2 instances, dynamic batching\)", log)
    assert load and log.rfind("warm-up sample", 0, load.start()) > 0  # warm-up before the version serves
    grpc_c = grpcclient.InferenceServerClient(server.grpc_url)
    inp = grpcclient.InferInput("x", [2, 4], "FP32")
    inp.set_data_from_numpy(x)
    np.testing.assert_allclose(grpc_c.infer("warm", [inp]).as_numpy("y"), 3 * x + 1)
    log = _log(server)  # in process, the gRPC server's process loads (and warms up) sessions of its own
    assert log.count("warm-up sample 'zeros'") == 6 * log.count("loaded warm/1 (") > 0


def test_a_failing_warmup_sample_fails_the_load(server):
    http = httpclient.InferenceServerClient(server.http_url)
    inp = httpclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
    with pytest.raises(InferenceServerException) as info:
        http.infer("badwarm", [inp])
    assert info.value.status() == "503"
    assert "failed to run warmup sample 'wrong': it gives no data for input(s) x" in info.value.message()
