"""Ensembles (issue 28 item 1) driven with tritonclient over HTTP and gRPC,
in process and (in the worker-mode pass) on workers: a three-step pipeline
against the steps chained by hand with onnxruntime, a diamond, a failing
step, metadata/config/readiness, exact statistics, and the management API
refusing to delete a composing version (409, the ensemble named).

The models: tests/support/repository.py ``ENSEMBLES`` (imported from the
repository as Triton lays one out: config.pbtxt and an empty ``1/``)."""

from __future__ import annotations

import time

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import onnx_models as m
from tests.support.live import bearer, people_with_tokens, request

pytestmark = pytest.mark.interop

CLIENTS = {"http": httpclient, "grpc": grpcclient}


@pytest.fixture(scope="module", params=sorted(CLIENTS))
def client(request, model_server):
    module = CLIENTS[request.param]
    url = model_server.http_url if request.param == "http" else model_server.grpc_url
    c = module.InferenceServerClient(url)
    yield module, c
    c.close()


def _session(payload: bytes) -> ort.InferenceSession:
    return ort.InferenceSession(payload, providers=["CPUExecutionProvider"])


def _infer(module, c, model: str, name: str, array: np.ndarray, outputs=None):
    inp = module.InferInput(name, list(array.shape), "FP32")
    inp.set_data_from_numpy(array)
    wanted = [module.InferRequestedOutput(o) for o in outputs] if outputs else None
    return c.infer(model, [inp], outputs=wanted)


def test_three_steps_equal_the_steps_chained_by_hand(client):
    module, c = client
    raw = np.array([[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3], [5.9, 3.0, 4.2, 1.5]], dtype=np.float32)
    (features,) = _session(m.standardize()).run(None, {"raw": raw})
    (logits,) = _session(m.linear_classifier()).run(None, {"features": features})
    probabilities, label = _session(m.softmax_argmax()).run(None, {"logits": logits})
    assert len(set(label.tolist())) == 3  # the three rows land in three classes: the graph is not trivial

    result = _infer(module, c, "ens_pipeline", "RAW", raw)
    np.testing.assert_allclose(result.as_numpy("PROBABILITIES"), probabilities, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(result.as_numpy("LABEL"), label)
    response = result.get_response()
    version = response["model_version"] if module is httpclient else response.model_version
    assert version == "1"
    only = _infer(module, c, "ens_pipeline", "RAW", raw, outputs=["LABEL"])
    np.testing.assert_array_equal(only.as_numpy("LABEL"), label)
    assert only.as_numpy("PROBABILITIES") is None


def test_a_diamond_runs_both_middle_steps(client):
    module, c = client
    raw = np.arange(8, dtype=np.float32).reshape(2, 4)
    (features,) = _session(m.standardize()).run(None, {"raw": raw})
    left = 2.0 * features + 1.0
    right = -1.0 * features + 3.0
    result = _infer(module, c, "ens_diamond", "RAW", raw)
    np.testing.assert_allclose(result.as_numpy("LEFT"), left, rtol=1e-6)
    np.testing.assert_allclose(result.as_numpy("SUM"), left + right, rtol=1e-6)


def test_a_failing_step_is_named_with_its_status(client):
    module, c = client
    ok = _infer(module, c, "ens_failing", "RAW", np.ones((2, 4), dtype=np.float32))
    (features,) = _session(m.standardize()).run(None, {"raw": np.ones((2, 4), dtype=np.float32)})
    np.testing.assert_allclose(ok.as_numpy("OUT"), features + 0.5, rtol=1e-6)
    with pytest.raises(InferenceServerException) as info:
        _infer(module, c, "ens_failing", "RAW", np.ones((3, 4), dtype=np.float32))
    message = info.value.message()
    assert "ensemble 'ens_failing' step 2 (model 'ens_fixed_batch' version 1): input 'x' has shape [3, 4]" in message
    assert info.value.status() == ("400" if module is httpclient else "StatusCode.INVALID_ARGUMENT")
    # the ensemble's own inputs are checked first, as any model's
    with pytest.raises(InferenceServerException) as info:
        _infer(module, c, "ens_failing", "RAW", np.ones((2, 3), dtype=np.float32))
    assert "input 'RAW' has shape [2, 3], but model 'ens_failing' expects [-1, 4]" in info.value.message()


def test_metadata_config_and_readiness(client):
    module, c = client
    assert c.is_model_ready("ens_pipeline") and c.is_model_ready("ens_pipeline", "1")
    metadata = c.get_model_metadata("ens_pipeline")
    config = c.get_model_config("ens_pipeline")
    if module is grpcclient:
        from google.protobuf import json_format

        metadata = json_format.MessageToDict(metadata, preserving_proto_field_name=True)
        config = json_format.MessageToDict(config.config, preserving_proto_field_name=True)
    assert metadata["platform"] == "ensemble" and metadata["versions"] == ["1"]
    assert [(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in metadata["inputs"]] == [
        ("RAW", "FP32", [-1, 4])
    ]
    assert [(t["name"], t["datatype"]) for t in metadata["outputs"]] == [("PROBABILITIES", "FP32"), ("LABEL", "INT64")]
    assert config["platform"] == "ensemble" and int(config["max_batch_size"]) == 8
    steps = config["ensemble_scheduling"]["step"]
    assert [(s["model_name"], int(s["model_version"])) for s in steps] == [
        ("ens_preprocess", 1),
        ("ens_classifier", 1),
        ("ens_postprocess", 1),
    ]
    assert steps[2]["output_map"] == {"probabilities": "PROBABILITIES", "label": "LABEL"}
    assert c.is_model_ready("ens_classifier", "1")  # composing models are models of their own


def test_statistics_count_the_ensemble_and_each_composing_model(model_server):
    """Triton: the ensemble counts its requests, each composing model its own inferences."""
    http = httpclient.InferenceServerClient(model_server.http_url)
    grpc = grpcclient.InferenceServerClient(model_server.grpc_url)

    def read():
        counts = {}
        for name in ("ens_stats", "ens_stats_a", "ens_stats_b"):
            (stats,) = http.get_inference_statistics(name)["model_stats"]
            counts[name] = (
                stats["inference_count"],
                stats["execution_count"],
                stats["inference_stats"]["success"]["count"],
                stats["inference_stats"]["fail"]["count"],
            )
        return counts

    before = read()
    rows = 0
    for i, batch in enumerate((1, 3, 2)):
        module, c = (httpclient, http) if i % 2 else (grpcclient, grpc)
        x = np.full((batch, 4), float(i), dtype=np.float32)
        np.testing.assert_allclose(_infer(module, c, "ens_stats", "X", x).as_numpy("Y"), (x + 1.0) * 2.0)
        rows += batch
    with pytest.raises(InferenceServerException):  # refused before any step: counted as the ensemble's failure
        _infer(httpclient, http, "ens_stats", "X", np.ones((1, 3), dtype=np.float32))
    after = read()
    delta = {name: tuple(a - b for a, b in zip(after[name], before[name])) for name in after}
    assert rows == 6  # max_batch_size 0: each request is one inference whatever its first dimension (Triton)
    assert delta == {
        "ens_stats": (3, 3, 3, 1),
        "ens_stats_a": (3, 3, 3, 0),
        "ens_stats_b": (3, 3, 3, 0),
    }
    http.close()
    grpc.close()


def test_deleting_a_composing_version_is_refused_naming_the_ensemble(model_server):
    token = people_with_tokens(model_server, ens_ops="superuser")["ens_ops"]
    status, body = request(model_server, "DELETE", "/api/models/ens_classifier/versions/1/", headers=bearer(token))
    assert status == 409, body
    assert "step 2 of ensemble 'ens_pipeline' (version 1, READY)" in body["error"]
    status, body = request(model_server, "POST", "/v2/repository/models/ens_join/unload", headers=bearer(token))
    assert status == 409, body
    assert "ensemble 'ens_diamond'" in body["error"]
    c = httpclient.InferenceServerClient(model_server.http_url)
    assert c.is_model_ready("ens_classifier", "1") and c.is_model_ready("ens_diamond")
    c.close()


def test_unload_dependents_unloads_what_only_that_ensemble_runs(model_server):
    """Triton's ``unload_dependents``: unloading an ensemble also unloads the
    models it runs, except one another loaded ensemble still runs."""
    ops = bearer(people_with_tokens(model_server, ens_unloader="superuser")["ens_unloader"])
    http = httpclient.InferenceServerClient(model_server.http_url)
    grpc = grpcclient.InferenceServerClient(model_server.grpc_url)
    try:
        assert all(http.is_model_ready(name) for name in ("ens_failing", "ens_fixed_batch", "ens_preprocess"))
        http.unload_model("ens_failing", unload_dependents=True, headers=ops)
        index = {e["name"]: e for e in http.get_model_repository_index(headers=ops) if e.get("version") == "1"}
        assert index["ens_failing"]["state"] == "UNAVAILABLE" and index["ens_fixed_batch"]["state"] == "UNAVAILABLE"
        assert not grpc.is_model_ready("ens_failing") and not grpc.is_model_ready("ens_fixed_batch")
        # ens_pipeline and ens_diamond still run ens_preprocess: it stays
        assert index["ens_preprocess"]["state"] == "READY" and grpc.is_model_ready("ens_preprocess")
        assert grpc.is_model_ready("ens_pipeline")
        # without the parameter only the ensemble goes
        http.unload_model("ens_stats", headers=ops)
        assert not http.is_model_ready("ens_stats") and http.is_model_ready("ens_stats_a")
    finally:
        for name in ("ens_fixed_batch", "ens_failing", "ens_stats"):
            http.load_model(name, headers=ops)
        http.close()
        grpc.close()


def _served(server, after_ms: float) -> int:
    """The requests the workers answered (their heartbeats' ``served``), from
    heartbeats written after ``after_ms`` (ms since the epoch)."""
    import redis

    from inference.workers.messages import announcement_json
    from inference.workers.placement import HEARTBEAT_PREFIX

    client = redis.Redis.from_url(server.env["REDIS_URL"])
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        values = [client.get(key) for key in client.scan_iter(f"{HEARTBEAT_PREFIX}*")]
        beats = [announcement_json.decode(v) for v in values if v]
        if beats and all(beat.beat_ms > after_ms for beat in beats):
            client.close()
            return sum(beat.served for beat in beats)
        time.sleep(0.1)
    raise AssertionError("no fresh worker heartbeat")


def test_a_chain_on_one_worker_is_one_exchange_and_counts_each_step(model_server):
    """Worker mode: the three steps of ens_chain go to the worker as one
    request (the worker's count of answered requests grows by one per
    ensemble request), answer as the models chained by hand, count one
    inference per step per composing model, and a failing middle step is
    named (400) and counted as its model's failure only."""
    http = httpclient.InferenceServerClient(model_server.http_url)
    grpc = grpcclient.InferenceServerClient(model_server.grpc_url)
    models = ("ens_chain", "ens_chain_a", "ens_chain_b", "ens_chain_c")

    def counts():
        out = {}
        for name in models:
            (stats,) = http.get_inference_statistics(name)["model_stats"]
            success, fail = stats["inference_stats"]["success"]["count"], stats["inference_stats"]["fail"]["count"]
            out[name] = (stats["inference_count"], stats["execution_count"], success, fail)
        return out

    workers = model_server.env.get("INFERENCE_EXECUTOR") == "workers"
    before, served = counts(), _served(model_server, time.time() * 1000 + 50) if workers else 0
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    (a,) = _session(m.affine(1.0, 1.0)).run(None, {"x": x})
    (b,) = _session(m.affine(1.0, 0.5, batch=2)).run(None, {"x": a})
    (y,) = _session(m.affine(2.0, 0.0)).run(None, {"x": b})
    for module, c in ((httpclient, http), (grpcclient, grpc), (httpclient, http)):
        np.testing.assert_allclose(_infer(module, c, "ens_chain", "X", x).as_numpy("Y"), y, rtol=1e-6)
    for module, c in ((httpclient, http), (grpcclient, grpc)):
        with pytest.raises(InferenceServerException) as info:
            _infer(module, c, "ens_chain", "X", np.ones((3, 4), dtype=np.float32))
        assert "ensemble 'ens_chain' step 2 (model 'ens_chain_b' version 1): input 'x' has shape [3, 4]" in (
            info.value.message()
        )
        assert info.value.status() == ("400" if module is httpclient else "StatusCode.INVALID_ARGUMENT")
    if workers:
        assert _served(model_server, time.time() * 1000 + 50) - served == 5  # not 3 x 3 + 2 x 2
    after = counts()
    delta = {name: tuple(n - o for n, o in zip(after[name], before[name])) for name in models}
    assert delta == {
        "ens_chain": (3, 3, 3, 2),
        "ens_chain_a": (5, 5, 5, 0),  # max_batch_size 0: one inference per request
        "ens_chain_b": (3, 3, 3, 2),
        "ens_chain_c": (3, 3, 3, 0),
    }
    http.close()
    grpc.close()
