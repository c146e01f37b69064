"""Triton's extensions through tritonclient's own methods, over HTTP and gRPC:
model repository, model configuration (also driven by the real perf_analyzer),
statistics, classification, compression, parameters; Prometheus metrics and
the request log after known traffic."""

from __future__ import annotations

import gzip
import json
import re
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.conftest import EXECUTOR
from tests.interop.test_rest_wire import Wire
from tests.support import stalls
from tests.support.live import people_with_tokens, request, wait_for
from tests.support.server import ROOT

pytestmark = pytest.mark.interop

EXTENSIONS = [
    "binary_tensor_data",
    "classification",
    "sequence",
    "sequence(string_id)",
    "model_repository",
    "model_repository(unload_dependents)",
    "model_configuration",
    "statistics",
    "parameters",
    "trace",
    "logging",
    "system_shared_memory",
    "schedule_policy",
]


@pytest.fixture(scope="module")
def http(model_server):
    with httpclient.InferenceServerClient(model_server.http_url) as c:
        yield c


@pytest.fixture(scope="module")
def grpc_client(model_server):
    c = grpcclient.InferenceServerClient(model_server.grpc_url)
    yield c
    c.close()


@pytest.fixture(scope="module")
def wire(model_server):
    return Wire(model_server.http_url)


@pytest.fixture(scope="module")
def tokens(model_server):
    """An operator ("ops") and a team member ("dana", team "vision") with API tokens."""
    return people_with_tokens(model_server, ops="superuser", dana="vision")


def auth(token: str) -> dict:
    """The token as a header both HTTP and gRPC accept (gRPC metadata keys are lowercase)."""
    return {"authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def ops(tokens):
    """Headers of the operator's token (the test repository's models belong to no team)."""
    return auth(tokens["ops"])


def test_server_metadata_lists_exactly_the_extensions(http, grpc_client):
    assert http.get_server_metadata()["extensions"] == EXTENSIONS
    assert list(grpc_client.get_server_metadata().extensions) == EXTENSIONS


# -- model repository ------------------------------------------------------------
def test_repository_index(http, grpc_client):
    index = http.get_model_repository_index()
    by_key = {(e["name"], e.get("version")): e for e in index}
    assert by_key[("simple", "1")] == {"name": "simple", "version": "1", "state": "READY"}
    assert by_key[("broken", "1")]["state"] == "UNAVAILABLE" and "ONNX" in by_key[("broken", "1")]["reason"]
    assert [e["name"] for e in index] == sorted(e["name"] for e in index)
    ready = http.get_model_repository_index(query_params=None)
    assert len(ready) == len(index)
    grpc_index = grpc_client.get_model_repository_index().models
    assert {(m.name, m.version, m.state) for m in grpc_index} == {(e["name"], e["version"], e["state"]) for e in index}


def test_repository_index_ready_filter(wire):
    status, _, body = wire.request("POST", "/v2/repository/index", json.dumps({"ready": True}).encode())
    assert status == 200
    entries = json.loads(body)
    assert entries and all(e["state"] == "READY" for e in entries)
    assert "broken" not in {e["name"] for e in entries}


def everywhere(predicate) -> bool:
    """``predicate`` holds at once for several calls in a row (no waiting):
    they spread over the HTTP processes, and every process must have seen a
    registry change before the call that made it answered (read-your-writes)."""
    return all(predicate() for _ in range(8))


def test_unload_and_load_reach_every_process(http, grpc_client, ops):
    x = np.zeros((1, 3), dtype=np.float32)
    assert http.is_model_ready("repo_probe") and grpc_client.is_model_ready("repo_probe")
    http.unload_model("repo_probe", unload_dependents=True, headers=ops)
    assert everywhere(lambda: not http.is_model_ready("repo_probe") and not grpc_client.is_model_ready("repo_probe"))
    inp = grpcclient.InferInput("INPUT0", [1, 3], "FP32")
    inp.set_data_from_numpy(x)
    with pytest.raises(InferenceServerException) as info:
        grpc_client.infer("repo_probe", [inp])
    assert info.value.status() == "StatusCode.UNAVAILABLE" and "unloaded" in info.value.message()
    entry = next(e for e in http.get_model_repository_index() if e["name"] == "repo_probe")
    assert entry["state"] == "UNAVAILABLE" and "unloaded" in entry["reason"]  # the version is still stored
    for ask in (http.get_model_metadata, http.get_model_config):  # no default version: one lookup, one answer
        with pytest.raises(InferenceServerException) as info:
            ask("repo_probe")
        assert info.value.status() == "503" and "'repo_probe' has no available versions" in info.value.message()
    with pytest.raises(InferenceServerException) as info:
        grpc_client.get_model_config("repo_probe")
    assert info.value.status() == "StatusCode.UNAVAILABLE" and "no available versions" in info.value.message()
    grpc_client.load_model("repo_probe", headers=ops)
    assert everywhere(lambda: http.is_model_ready("repo_probe") and grpc_client.is_model_ready("repo_probe"))
    np.testing.assert_array_equal(grpc_client.infer("repo_probe", [inp]).as_numpy("OUTPUT0"), x)
    grpc_client.unload_model("repo_probe", headers=ops)
    assert everywhere(lambda: not http.is_model_ready("repo_probe"))
    http.load_model("repo_probe", headers=ops)
    assert everywhere(lambda: grpc_client.is_model_ready("repo_probe") and http.is_model_ready("repo_probe"))


def test_load_with_config_changes_the_version_policy(http, ops):
    http.load_model("versioned", config=json.dumps({"version_policy": {"latest": {"num_versions": 1}}}), headers=ops)
    assert everywhere(lambda: http.get_model_metadata("versioned")["versions"] == ["2"])
    assert http.get_model_config("versioned")["version_policy"] == {"latest": {"num_versions": 1}}
    http.load_model("versioned", config=json.dumps({"version_policy": {"all": {}}}), headers=ops)
    assert everywhere(lambda: http.get_model_metadata("versioned")["versions"] == ["2", "1"])


@pytest.mark.parametrize("call", ["load_model", "unload_model"])
def test_repository_unknown_model(http, grpc_client, ops, call):
    with pytest.raises(InferenceServerException) as info:
        getattr(http, call)("no_such_model", headers=ops)
    assert info.value.status() == "404"
    with pytest.raises(InferenceServerException) as info:
        getattr(grpc_client, call)("no_such_model", headers=ops)
    assert info.value.status() == "StatusCode.NOT_FOUND"


@pytest.mark.parametrize("call", ["load_model", "unload_model"])
def test_repository_control_needs_a_token_of_the_models_team(http, grpc_client, tokens, model_server, call):
    """Anonymous calls are 401 / UNAUTHENTICATED; a team token may not touch an
    operator-owned model (403 / PERMISSION_DENIED); the model keeps serving."""
    for headers, status, grpc_status in (
        ({}, "401", "StatusCode.UNAUTHENTICATED"),
        (auth("mh_not-a-token"), "401", "StatusCode.UNAUTHENTICATED"),
        (auth(tokens["dana"]), "403", "StatusCode.PERMISSION_DENIED"),
    ):
        with pytest.raises(InferenceServerException) as info:
            getattr(http, call)("simple", headers=headers)
        assert info.value.status() == status, info.value.message()
        with pytest.raises(InferenceServerException) as info:
            getattr(grpc_client, call)("simple", headers=headers)
        assert info.value.status() == grpc_status
    assert all(http.is_model_ready("simple") for _ in range(4))
    # A cross-site form post carries no Authorization header: refused like any anonymous call.
    status, _ = request(
        model_server, "POST", "/v2/repository/models/simple/unload", b"", {"Content-Type": "text/plain"}
    )
    assert status == 401 and http.is_model_ready("simple")


def test_repository_control_is_audited_with_its_actor(http, ops, model_server):
    http.unload_model("audited", headers=ops)
    http.load_model("audited", headers=ops)
    status, events = request(model_server, "GET", "/api/models/audited/audit/", headers=ops)
    assert status == 200
    assert [(e["action"], e["actor_name"]) for e in events["results"][:2]] == [
        ("model.load", "ops"),
        ("model.unload", "ops"),
    ]


def test_repository_bad_parameters(wire, ops):
    status, _, body = wire.request(
        "POST",
        "/v2/repository/models/simple/load",
        json.dumps({"parameters": {"file:1/model.onnx": "AAAA"}}).encode(),
        ops,
    )
    assert status == 400 and "file:" in json.loads(body)["error"]
    status, _, body = wire.request(
        "POST",
        "/v2/repository/models/simple/unload",
        json.dumps({"parameters": {"unload_dependents": "yes"}}).encode(),
        ops,
    )
    assert status == 400 and "boolean" in json.loads(body)["error"]


# -- model configuration --------------------------------------------------------------
def test_model_config(http, grpc_client):
    config = http.get_model_config("affine")
    assert config["name"] == "affine" and config["platform"] == "onnxruntime_onnx"
    assert config["backend"] == "onnxruntime" and config["max_batch_size"] == 8
    assert config["input"] == [
        {
            "name": "x",
            "data_type": "TYPE_FP32",
            "dims": [4],
            "is_shape_tensor": False,
            "format": "FORMAT_NONE",
            "allow_ragged_batch": False,
            "optional": False,
            "is_non_linear_format_io": False,
        }
    ]
    assert [(o["name"], o["data_type"], o["dims"]) for o in config["output"]] == [("y", "TYPE_FP32", [4])]
    assert config["version_policy"] == {"latest": {"num_versions": 1}}
    assert config["instance_group"] == [
        {
            "name": "affine_0",
            "kind": "KIND_CPU",
            "count": 1,
            "gpus": [],
            "secondary_devices": [],
            "profile": [],
            "passive": False,
            "host_policy": "",
        }
    ]
    assert config["model_warmup"] == [
        {
            "name": "w",
            "batch_size": 1,
            "inputs": {"x": {"data_type": "TYPE_FP32", "dims": [4], "zero_data": True}},
            "count": 0,
        }
    ]  # as config.pbtxt has it
    simple = http.get_model_config("simple", "1")
    assert simple["max_batch_size"] == 0 and simple["input"][0]["dims"] == [-1, 16]
    assert simple["input"][1]["data_type"] == "TYPE_INT32"
    message = grpc_client.get_model_config("affine").config
    assert (message.name, message.max_batch_size, message.backend) == ("affine", 8, "onnxruntime")
    assert [(i.name, i.data_type, list(i.dims)) for i in message.input] == [("x", 11, [4])]  # TYPE_FP32 = 11
    assert message.instance_group[0].kind == 2  # KIND_CPU
    with pytest.raises(InferenceServerException) as info:
        http.get_model_config("nope")
    assert info.value.status() == "404"
    with pytest.raises(InferenceServerException) as info:
        grpc_client.get_model_config("simple", "9")
    assert info.value.status() == "StatusCode.NOT_FOUND"


PERF_ANALYZER = ROOT / ".venv" / "tools" / "perf_analyzer"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_runs_against_the_server(model_server, protocol):
    """Triton's own load tool: it reads the model configuration and metadata,
    sends inferences and reads the statistics extension."""
    assert PERF_ANALYZER.exists(), "run `make test-tools` (scripts/install_perf_analyzer.sh)"
    url = model_server.http_url if protocol == "http" else model_server.grpc_url
    done = stalls.run(
        [str(PERF_ANALYZER), "-m", "affine", "-u", url, "-i", protocol, "-b", "2", "--concurrency-range", "2",
         "--measurement-mode", "count_windows", "--measurement-request-count", "200",
         "--stability-percentage", "500", "--max-trials", "20"],
        120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    throughput = float(re.search(r"throughput: ([\d.]+) infer/sec", done.stdout).group(1))
    assert throughput > 0
    server_count = int(re.search(r"Inference count: (\d+)", done.stdout).group(1))
    execution_count = int(re.search(r"Execution count: (\d+)", done.stdout).group(1))
    assert server_count == 2 * execution_count > 0  # batch size 2, as sent
    # Issue 29: the server's count over perf_analyzer's windows is the client's, up to the requests in
    # flight at the windows' edges (it reads the statistics and its clock a moment apart: the concurrency,
    # 2, per edge of each of the 3 windows it merges, and one more that completes between the two reads:
    # 13 seen once under load, 40 of 3,926 once on a slower machine: the two reads further apart); a
    # count a flush late was 1 s of traffic, thousands of requests here: 2% of the count tells them apart.
    client_requests = int(re.search(r"Client: \s+Request count: (\d+)", done.stdout).group(1))
    server_requests = int(re.search(r"Successful request count: (\d+)", done.stdout).group(1))
    assert abs(server_requests - client_requests) <= max((2 + 1) * 2 * 3, client_requests // 50), done.stdout


# -- statistics ---------------------------------------------------------------------------
def test_statistics_count_across_processes(http, grpc_client, wire):
    """3 REST + 2 gRPC successes (batch 2 and 1) and 1 failure on stats_probe."""
    before = http.get_inference_statistics("stats_probe")["model_stats"][0]
    for batch in (2, 2, 2):
        inp = httpclient.InferInput("x", [batch, 4], "FP32")
        inp.set_data_from_numpy(np.ones((batch, 4), dtype=np.float32))
        http.infer("stats_probe", [inp])
    for _ in range(2):
        inp = grpcclient.InferInput("x", [1, 4], "FP32")
        inp.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
        grpc_client.infer("stats_probe", [inp])
    bad = {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}
    assert wire.request("POST", "/v2/models/stats_probe/infer", json.dumps(bad).encode())[0] == 400

    def delta(stats, key):
        return stats[key] - before[key]

    stats = http.get_inference_statistics("stats_probe")["model_stats"][0]  # at once: no flush to wait for
    assert delta(stats, "execution_count") == 5
    assert stats["inference_stats"]["fail"]["count"] - before["inference_stats"]["fail"]["count"] == 1
    assert stats["name"] == "stats_probe" and stats["version"] == "1"
    assert delta(stats, "inference_count") == 3 * 2 + 2 * 1
    assert stats["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"] == 5
    assert stats["inference_stats"]["compute_infer"]["ns"] > before["inference_stats"]["compute_infer"]["ns"]
    assert stats["last_inference"] > int((time.time() - 120) * 1000)
    sizes = {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]}
    assert sizes[2] >= 3 and sizes[1] >= 2
    grpc_stats = grpc_client.get_inference_statistics("stats_probe", "1").model_stats[0]
    assert grpc_stats.execution_count == stats["execution_count"]
    assert grpc_stats.inference_stats.success.count == stats["inference_stats"]["success"]["count"]
    everything = http.get_inference_statistics()["model_stats"]
    assert {"stats_probe", "simple"} <= {s["name"] for s in everything}
    with pytest.raises(InferenceServerException) as info:
        http.get_inference_statistics("nope")
    assert info.value.status() == "404"


def test_statistics_add_up_at_once_whichever_process_answers(model_server):
    """Issue 29: read, N inferences spread over every REST and gRPC process
    (a new connection each), read: the difference is exactly N, at once, 16
    times in a row (in process, and in worker mode in the worker-mode pass)."""
    import random

    rng = random.Random(29)

    def read(transport: str) -> tuple[int, int, int]:
        if transport == "http":
            stats = httpclient.InferenceServerClient(model_server.http_url).get_inference_statistics("stats_probe")
            (model,) = stats["model_stats"]
            return model["inference_count"], model["execution_count"], model["inference_stats"]["success"]["count"]
        stats = grpcclient.InferenceServerClient(model_server.grpc_url).get_inference_statistics("stats_probe")
        (model,) = stats.model_stats
        return model.inference_count, model.execution_count, model.inference_stats.success.count

    for round_ in range(16):
        before = read("http" if round_ % 2 else "grpc")
        rows = 0
        requests = rng.randint(3, 8)
        for i in range(requests):
            batch = rng.randint(1, 3)
            rows += batch
            transport = "grpc" if (i + round_) % 2 else "http"
            module = grpcclient if transport == "grpc" else httpclient
            client = module.InferenceServerClient(
                model_server.grpc_url if transport == "grpc" else model_server.http_url
            )
            inp = module.InferInput("x", [batch, 4], "FP32")
            x = np.full((batch, 4), float(i), dtype=np.float32)
            inp.set_data_from_numpy(x)
            np.testing.assert_allclose(client.infer("stats_probe", [inp]).as_numpy("y"), x)  # y = x
        after = read("grpc" if round_ % 2 else "http")
        assert (after[0] - before[0], after[1] - before[1], after[2] - before[2]) == (rows, requests, requests), round_


# -- classification ----------------------------------------------------------------------
def test_classification_whole_tensor_with_labels(http, grpc_client):
    """pair_classifier (max_batch_size 0): top-N over the flattened output, labels from metadata."""
    a = np.array([[0.0, 2.0], [1.0, 0.0]], dtype=np.float32)
    b = np.zeros((2, 2), dtype=np.float32)
    probs = np.exp(a) / np.exp(a).sum(axis=1, keepdims=True)
    flat = probs.ravel()
    order = np.argsort(-flat, kind="stable")[:3]
    labels = ["neg", "pos"]
    expected = [f"{flat[i]:f}:{i}" + (f":{labels[i]}" if i < 2 else "") for i in order]
    ins = [httpclient.InferInput("a", [2, 2], "FP32"), httpclient.InferInput("b", [2, 2], "FP32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(b)
    result = http.infer("pair_classifier", ins, outputs=[httpclient.InferRequestedOutput("scores", class_count=3)])
    got = result.as_numpy("scores")
    assert got.shape == (3,) and [x.decode() for x in got] == expected
    gins = [grpcclient.InferInput("a", [2, 2], "FP32"), grpcclient.InferInput("b", [2, 2], "FP32")]
    gins[0].set_data_from_numpy(a)
    gins[1].set_data_from_numpy(b)
    gresult = grpc_client.infer(
        "pair_classifier", gins, outputs=[grpcclient.InferRequestedOutput("scores", class_count=3)]
    )
    assert [x.decode() for x in gresult.as_numpy("scores")] == expected


def test_classification_per_batch_row(http):
    """affine (max_batch_size 8): y = 2x + 1 classified row by row."""
    x = np.array([[0.0, 3.0, 1.0, 2.0], [5.0, 4.0, 7.0, 6.0]], dtype=np.float32)
    inp = httpclient.InferInput("x", [2, 4], "FP32")
    inp.set_data_from_numpy(x)
    result = http.infer("affine", [inp], outputs=[httpclient.InferRequestedOutput("y", class_count=2)])
    y = 2 * x + 1
    expected = [[f"{row[i]:f}:{i}" for i in np.argsort(-row, kind="stable")[:2]] for row in y]
    got = result.as_numpy("y")
    assert got.shape == (2, 2)
    assert [[v.decode() for v in row] for row in got] == expected
    bad = httpclient.InferInput("INPUT0", [1, 2], "BOOL")
    bad.set_data_from_numpy(np.array([[True, False]]))
    with pytest.raises(InferenceServerException, match="cannot be classified"):
        http.infer("identity_bool", [bad], outputs=[httpclient.InferRequestedOutput("OUTPUT0", class_count=1)])


# -- compression ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "request_alg,response_alg", [("gzip", "gzip"), ("deflate", "deflate"), ("gzip", None), (None, "deflate")]
)
def test_compression_with_tritonclient(http, request_alg, response_alg):
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    ins = [httpclient.InferInput("INPUT0", [2, 16], "INT32"), httpclient.InferInput("INPUT1", [2, 16], "INT32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(a, binary_data=False)
    result = http.infer(
        "simple", ins, request_compression_algorithm=request_alg, response_compression_algorithm=response_alg
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * a)


def test_compression_on_the_wire(wire):
    header = json.dumps(
        {
            "inputs": [{"name": "INPUT0", "shape": [1, 2], "datatype": "FP32", "parameters": {"binary_data_size": 8}}],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    body = header + np.array([1.5, 2.5], dtype="<f4").tobytes()
    status, headers, payload = wire.request(
        "POST",
        "/v2/models/identity_fp32/infer",
        gzip.compress(body),
        {
            "Content-Encoding": "gzip",
            "Inference-Header-Content-Length": str(len(header)),
            "Accept-Encoding": "deflate;q=0.5, gzip;q=0.9",
        },
    )
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    plain = gzip.decompress(payload)
    length = int(headers["Inference-Header-Content-Length"])  # refers to the uncompressed body
    meta = json.loads(plain[:length])
    assert meta["outputs"][0]["parameters"]["binary_data_size"] == 8
    assert np.frombuffer(plain[length:], dtype="<f4").tolist() == [1.5, 2.5]
    status, headers, payload = wire.request(
        "POST", "/v2/models/identity_fp32/infer", zlib.compress(body),
        {"Content-Encoding": "deflate", "Inference-Header-Content-Length": str(len(header)), "Accept-Encoding": "gzip;q=0"},
    )  # fmt: skip
    assert status == 200 and "Content-Encoding" not in headers


def test_compression_errors(wire):
    status, headers, body = wire.request("POST", "/v2/models/simple/infer", b"xx", {"Content-Encoding": "br"})
    assert status == 415 and headers["Accept-Encoding"] == "gzip, deflate"
    assert "Unsupported compression type" in json.loads(body)["error"]
    status, _, body = wire.request(
        "POST", "/v2/models/simple/infer", b"\x1f\x8bnot really gzip", {"Content-Encoding": "gzip"}
    )
    assert status == 400 and "not valid gzip" in json.loads(body)["error"]
    status, _, body = wire.request(
        "POST", "/v2/models/simple/infer", gzip.compress(b'{"inputs": [')[:-6], {"Content-Encoding": "gzip"}
    )
    assert status == 400
    bomb = gzip.compress(b" " * (65 * 1024 * 1024))
    status, _, body = wire.request("POST", "/v2/models/simple/infer", bomb, {"Content-Encoding": "gzip"})
    assert status == 413 and "inflates beyond" in json.loads(body)["error"]
    assert wire.request("GET", "/v2/health/ready")[0] == 200


# -- parameters ----------------------------------------------------------------------------
def _slow_inputs(module, iterations: int):
    x = module.InferInput("x", [1, 256], "FP32")
    x.set_data_from_numpy(np.full((1, 256), 0.5, dtype=np.float32))
    n = module.InferInput("n", [], "INT64")
    n.set_data_from_numpy(np.array(iterations, dtype=np.int64))
    return [x, n]


def test_timeout_bounds_a_running_inference(http, grpc_client):
    """About 4 s of work with a 50 ms timeout: refused within a fraction of that."""
    for client, module, code in ((http, httpclient, "504"), (grpc_client, grpcclient, "StatusCode.DEADLINE_EXCEEDED")):
        started = time.monotonic()
        with pytest.raises(InferenceServerException) as info:
            client.infer("slow", _slow_inputs(module, 1_000_000), timeout=50_000)
        elapsed = time.monotonic() - started
        assert info.value.status() == code and "deadline" in info.value.message()
        assert elapsed < 1.5, elapsed
    quick = http.infer("slow", _slow_inputs(httpclient, 10), timeout=30_000_000)
    assert quick.as_numpy("y").shape == (1, 256)
    assert http.is_server_ready()


def test_priority_and_unknown_parameters_are_accepted(http, grpc_client):
    a = np.ones((1, 16), dtype=np.int32)
    ins = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    for i in ins:
        i.set_data_from_numpy(a)
    result = http.infer("simple", ins, priority=3, parameters={"my_tag": "abc", "ratio": 0.5, "flag": True})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * a)
    gins = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    for i in gins:
        i.set_data_from_numpy(a)
    result = grpc_client.infer("simple", gins, priority=2, parameters={"my_tag": "abc", "count": 4})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), 0 * a)


def test_reserved_and_malformed_parameters(wire, model_server):
    base = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
                       {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}]}  # fmt: skip
    for params, needle in (
        ({"triton_custom": 1}, "reserved for Triton usage"),
        ({"timeout": -1}, "timeout"),
        ({"timeout": "soon"}, "timeout"),
        ({"priority": 1.5}, "priority"),
        ({"nested": {"a": 1}}, "string, number or boolean"),
    ):
        status, _, body = wire.request(
            "POST", "/v2/models/simple/infer", json.dumps({**base, "parameters": params}).encode()
        )
        assert status == 400 and needle in json.loads(body)["error"], body
    import grpc

    channel = grpc.insecure_channel(model_server.grpc_url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    request = pb.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        request.raw_input_contents.append(np.ones(16, dtype="<i4").tobytes())
    request.parameters["triton_secret"].string_param = "x"
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "reserved" in info.value.details()
    channel.close()


# -- metrics and the request log --------------------------------------------------------------
def _metric(text: str, name: str, **labels) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " "):
            got = {}
        elif line.startswith(name + "{"):
            got = dict(re.findall(r'(\w+)="([^"]*)"', line[line.index("{") : line.index("}")]))
        else:
            continue
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_metrics_after_known_traffic(wire, http, grpc_client, model_server):
    def scrape() -> str:
        status, headers, body = wire.request("GET", "/metrics")
        assert status == 200 and headers["Content-Type"].startswith("text/plain")
        return body.decode()

    before = scrape()
    inp = httpclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
    for _ in range(4):
        http.infer("stats_probe", [inp])
    ginp = grpcclient.InferInput("x", [1, 4], "FP32")
    ginp.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
    for _ in range(3):
        grpc_client.infer("stats_probe", [ginp])
    bad = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP64", "data": [1, 2, 3, 4]}]}).encode()
    wire.request("POST", "/v2/models/stats_probe/infer", bad)
    wire.request("POST", "/v1/models/stats_probe:predict", json.dumps({"instances": [[1, 2, 3, 4]]}).encode())
    wire.request("POST", "/v2/models/ghost_model/infer", bad)
    after = scrape()
    name = "modelhost_inference_requests_total"

    def change(**labels):
        return _metric(after, name, **labels) - _metric(before, name, **labels)

    assert change(model="stats_probe", version="1", protocol="rest", outcome="success") == 4
    assert change(model="stats_probe", version="1", protocol="grpc", outcome="success") == 3
    assert change(model="stats_probe", version="1", protocol="rest", outcome="invalid_argument") == 1
    assert change(model="stats_probe", version="1", protocol="tfserving", outcome="success") == 1
    assert change(model="", protocol="rest", outcome="not_found") == 1  # unknown names do not become labels
    assert "ghost_model" not in after
    hist = "modelhost_inference_request_duration_seconds_count"
    assert (
        _metric(after, hist, model="stats_probe", protocol="grpc")
        - _metric(before, hist, model="stats_probe", protocol="grpc")
        == 3
    )
    if EXECUTOR != "inprocess":  # sessions live in the workers; the front end sees their queues
        assert 'modelhost_worker_queue_depth{queue="infer.cpu"}' in after
    else:
        assert _metric(after, "modelhost_loaded_sessions") >= 1
        assert _metric(after, "modelhost_model_load_duration_seconds_count", model="stats_probe") >= 1


def test_request_log_lines(http, model_server):
    inp = httpclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(np.full((1, 4), 1234.5678, dtype=np.float32))
    http.infer("stats_probe", [inp], request_id="log-me-42")
    log = Path(model_server.log_path)
    assert wait_for(lambda: "id=log-me-42" in log.read_text(), timeout=5)
    line = next(ln for ln in log.read_text().splitlines() if "id=log-me-42" in ln)
    fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
    assert fields["protocol"] == "rest" and fields["model"] == "stats_probe" and fields["version"] == "1"
    assert fields["status"] == "200" and fields["outcome"] == "success"
    assert float(fields["latency_ms"]) > 0 and int(fields["bytes_in"]) > 0 and int(fields["bytes_out"]) > 0
    assert "1234.5" not in log.read_text()  # tensor contents are never logged
