"""Shadow traffic against a live server (in process, or through a worker with
MODELHOST_TEST_EXECUTOR=workers): version 1 of a model answers, version 2
gets a copy of every request (100%), and the comparison the management API
reports equals the one computed here with numpy over the same requests.

The two versions differ in a known way: ``y`` = Relu(s * x) with s 1 and
1.5 (equal for a request whose inputs are all negative: both zero), and a
classifier's ``scores`` = x @ W with two weight matrices whose argmax
agrees on some rows only. Inputs are multiples of 1/4 and weights small
integers, so float32 arithmetic is exact and numpy's answers are the
server's to the bit. Requests go through the real ``tritonclient``, over
HTTP (the REST processes) and gRPC (the event loop)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support import onnx_models as m
from tests.support.live import bearer, people_with_tokens, request, upload, wait_for

pytestmark = pytest.mark.interop

MODEL = "shadowed"
SCALES = {1: 1.0, 2: 1.5}
WEIGHTS = {
    1: [[1, 0, -1], [0, 1, 1], [2, -1, 0], [-1, 1, 2]],
    2: [[1, 1, -1], [0, 1, 2], [-1, -1, 0], [-1, 2, 2]],
}
REQUESTS = 48


def _expected(version: int, x: np.ndarray) -> dict[str, np.ndarray]:
    """What version ``version`` answers for ``x``, in numpy (float32, exact for these values)."""
    scaled = (x * np.float32(SCALES[version])).astype(np.float32)
    return {"y": np.maximum(scaled, np.float32(0)), "scores": x @ np.asarray(WEIGHTS[version], np.float32)}


def _inputs() -> list[np.ndarray]:
    """REQUESTS inputs of 1 to 3 rows, multiples of 1/4 in [-4, 4] without 0; every fourth all negative."""
    rng = np.random.default_rng(35)
    out = []
    for i in range(REQUESTS):
        rows = int(rng.integers(1, 4))
        x = (rng.integers(1, 17, size=(rows, 4)) * rng.choice([-1, 1], size=(rows, 4)) / 4).astype(np.float32)
        out.append(-np.abs(x) if i % 4 == 0 else x)
    return out


def _numpy_comparison(inputs: list[np.ndarray]) -> dict[str, dict]:
    """The comparison of version 2's answers with version 1's, per output, computed here."""
    out = {}
    for name in ("y", "scores"):
        live = [_expected(1, x)[name] for x in inputs]
        shadow = [_expected(2, x)[name] for x in inputs]
        diffs = np.concatenate([np.abs(a.astype(np.float64) - b).ravel() for a, b in zip(live, shadow)])
        agree = np.concatenate([a.argmax(axis=1) == b.argmax(axis=1) for a, b in zip(live, shadow)])
        exact = sum(a.tobytes() == b.tobytes() for a, b in zip(live, shadow))
        out[name] = {
            "compared": len(inputs), "exact_matches": exact, "exact_match_share": exact / len(inputs),
            "elements": diffs.size, "max_abs_diff": float(diffs.max()), "mean_abs_diff": float(diffs.mean()),
            "argmax_rows": agree.size, "argmax_agreement": float(agree.mean()),
        }  # fmt: skip
    return out


def _json(server, token, method: str, path: str, body=None):
    data = json.dumps(body).encode() if body is not None else b""
    headers = {**bearer(token), **({"Content-Type": "application/json"} if body is not None else {})}
    return request(server, method, path, data, headers)


@pytest.fixture(scope="module")
def alice(model_server):
    token = people_with_tokens(model_server, shadow_alice="shadowing")["shadow_alice"]
    for number in SCALES:
        status, answer = upload(model_server, token, MODEL, m.relu_scores(SCALES[number], WEIGHTS[number]), "shadowing")
        assert status in (201, 202) and answer["number"] == number, answer

    def ready() -> bool:
        status, answer = request(model_server, "GET", f"/api/models/{MODEL}/", headers=bearer(token))
        return status == 200 and [v["state"] for v in answer["versions"]] == ["READY", "READY"]

    assert wait_for(ready, timeout=90)
    status, answer = _json(
        model_server, token, "PATCH", f"/api/models/{MODEL}/", {"version_policy": "specific", "specific_versions": [1]}
    )
    assert status == 200 and answer["default_version"] == 1, answer
    return token


def _infer_http(client, token: str, x: np.ndarray):
    tensor = httpclient.InferInput("x", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=True)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=True) for n in ("y", "scores")]
    return client.infer(MODEL, [tensor], outputs=outputs, headers=bearer(token))


def _infer_grpc(client, token: str, x: np.ndarray):
    tensor = grpcclient.InferInput("x", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return client.infer(MODEL, [tensor], headers={"authorization": f"Bearer {token}"})


def test_the_comparison_equals_numpys_and_the_live_answers_stay_version_1s(model_server, alice):
    status, answer = _json(model_server, alice, "PUT", f"/api/models/{MODEL}/shadow/", {"version": 2, "percent": 100})
    assert status == 200 and answer["shadow"] == {"version": 2, "percent": 100.0, "serving": True}, answer
    inputs = _inputs()
    http_client = httpclient.InferenceServerClient(model_server.http_url)
    grpc_client = grpcclient.InferenceServerClient(model_server.grpc_url)
    try:
        for i, x in enumerate(inputs):  # one at a time: no copy is dropped for a busy server
            result = (_infer_http if i % 2 else _infer_grpc)(http_client if i % 2 else grpc_client, alice, x)
            response = result.get_response()
            version = response["model_version"] if isinstance(response, dict) else response.model_version
            assert version == "1"
            for name, want in _expected(1, x).items():
                np.testing.assert_array_equal(result.as_numpy(name), want)
    finally:
        http_client.close()
        grpc_client.close()
    want = _numpy_comparison(inputs)
    assert 0 < want["y"]["exact_matches"] < REQUESTS and 0 < want["scores"]["argmax_agreement"] < 1
    report = {}

    def counted() -> bool:  # every process writes its minutes every CHART_FLUSH_SECONDS (10 s)
        status, body = _json(model_server, alice, "GET", f"/api/models/{MODEL}/shadow/")
        report.update(body)
        return status == 200 and all(body["outputs"].get(n, {}).get("compared") == REQUESTS for n in want)

    assert wait_for(counted, timeout=60, interval=1.0), report
    assert (report["version"], report["requests"], report["errors"], report["dropped"], report["busy"]) == (
        2, REQUESTS, 0, 0, 0,
    )  # fmt: skip
    for name, expected in want.items():
        got = report["outputs"][name]
        assert got["mean_abs_diff"] == pytest.approx(expected.pop("mean_abs_diff"), rel=1e-12), name
        assert {k: got[k] for k in expected} == expected, name
        assert (got["mismatched_shapes"], got["nonfinite_diffs"]) == (0, 0)
    status, stats = request(model_server, "GET", f"/v2/models/{MODEL}/stats", headers=bearer(alice))
    assert status == 200, stats
    counts = {int(s["version"]): s["inference_stats"]["success"]["count"] for s in stats["model_stats"]}
    assert counts == {1: REQUESTS, 2: REQUESTS}  # the copies count in the shadow version's own statistics
    status, _ = _json(model_server, alice, "DELETE", f"/api/models/{MODEL}/shadow/")
    assert status == 204
