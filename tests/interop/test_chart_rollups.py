"""The charts' per-minute rollups written by a live server (in process, and
through an inference worker in the worker-mode run): a known load over REST
and gRPC reaches the database within the flush interval, per version and
transport, read back with the chart reader against the server's database."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.support import onnx_models as m
from tests.support.live import infer_json, manage, people_with_tokens, request, upload, wait_for

pytestmark = pytest.mark.interop

MODEL = "rolled_up"
READ = (
    "import json; from models_store.registry import charts; "
    "print(json.dumps([[s['name'], s['total_requests'], s['total_errors'], sum(s['executions']), "
    "sorted({b for b in s['mean_batch_size'] if b is not None})] for s in charts.model_charts('rolled_up', 'hour')['series']]))"
)


def test_a_known_load_is_rolled_up_per_version_and_transport(model_server):
    token = people_with_tokens(model_server, roller="ml")["roller"]
    status, answer = upload(model_server, token, MODEL, m.affine(2.0, 1.0), team="ml")
    assert status in (201, 202), answer  # 202: validated by a worker (worker mode)
    assert wait_for(lambda: request(model_server, "GET", f"/v2/models/{MODEL}/ready")[0] == 200, timeout=90)
    good, bad = np.ones((1, 4), np.float32), np.ones((1, 5), np.float32)
    for x, n, want in ((good, 5, 200), (bad, 2, 400)):
        for _ in range(n):
            assert infer_json(model_server, token, MODEL, x)[0] == want
    client = grpcclient.InferenceServerClient(model_server.grpc_url)
    for x, n in ((good, 3), (bad, 4)):
        for _ in range(n):
            tensor = grpcclient.InferInput("x", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            try:
                client.infer(MODEL, [tensor], headers={"authorization": f"Bearer {token}"})
            except InferenceServerException as exc:
                assert x is bad and "INVALID_ARGUMENT" in str(exc.status()), exc
    client.close()
    want = [["v1 grpc", 7, 4, 3, [1.0]], ["v1 rest", 7, 2, 5, [1.0]], ["all", 14, 6, 8, [1.0]]]
    seen = []

    def written() -> bool:  # every CHART_FLUSH_SECONDS (10 s by default) per serving process
        seen[:] = json.loads(manage(model_server, "shell", "-c", READ).strip().splitlines()[-1])
        return seen == want

    assert wait_for(written, timeout=45, interval=1.0), seen
