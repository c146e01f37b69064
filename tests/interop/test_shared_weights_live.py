"""A live ``serve`` (two HTTP processes and a gRPC process; in process, and
in worker mode with one CPU worker on the same machine) with
SHARED_WEIGHTS_MIN_MB=1: the repository's import at start writes the
machine's copy of a 4 MiB model's weights (ready means the first request
only maps it; in worker mode the front end writes it for the machine's
workers), the model's sessions in every process that serves it map that one
copy, answers are exact, and the copy goes when its version is deleted."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper

from tests.support import onnx_models as m
from tests.support import redis_db
from tests.support.live import manage, wait_for
from tests.support.rss import process_tree
from tests.support.server import serve_live

pytestmark = pytest.mark.interop

ROWS, COLUMNS = 256, 4096  # 4 MiB of FP32 weights


def _model() -> tuple[bytes, np.ndarray]:
    weight = np.random.default_rng(3).standard_normal((ROWS, COLUMNS), dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, ROWS])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, COLUMNS])],
        initializer=[numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString(), weight


@pytest.fixture(scope="module", params=["inprocess", "workers"])
def server(request, tmp_path_factory):
    payload, weight = _model()
    repository = tmp_path_factory.mktemp("shared-weights-repository")
    m.write_model(repository, "wide", payload)
    m.write_model(repository, "small", m.affine(2.0, 1.0))
    redis_url = redis_db.url("TEST_SHARED_WEIGHTS_REDIS_DB", 4) if request.param == "workers" else None
    var_dir = tmp_path_factory.mktemp(f"shared-weights-{request.param}")
    live = serve_live(repository, var_dir, {"SHARED_WEIGHTS_MIN_MB": "1"}, redis_url)
    started = next(live)
    started.weight, started.sha256 = weight, hashlib.sha256(payload).hexdigest()
    started.copy_at_start = _files(started.var_dir / "run" / "weights" / started.sha256)  # before any request
    yield started
    next(live, None)


def _files(directory: Path) -> dict[str, tuple[int, int, int]]:
    """The files of ``directory``: name -> (inode, size, mtime in ns); empty when it is missing."""
    if not directory.is_dir():
        return {}
    return {p.name: (p.stat().st_ino, p.stat().st_size, p.stat().st_mtime_ns) for p in directory.iterdir()}


def _mapping(pid: int, path: Path) -> bool:
    try:
        return str(path) in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def test_every_serving_process_maps_the_machines_one_copy(server):
    x = np.random.default_rng(4).standard_normal((2, ROWS), dtype=np.float32)
    expected = x @ server.weight
    for _ in range(6):  # new connections: the requests reach both HTTP processes
        client = httpclient.InferenceServerClient(server.http_url)
        inp = httpclient.InferInput("x", [2, ROWS], "FP32")
        inp.set_data_from_numpy(x)
        np.testing.assert_allclose(client.infer("wide", [inp]).as_numpy("y"), expected, rtol=1e-4, atol=1e-4)
        client.close()
    ginp = grpcclient.InferInput("x", [2, ROWS], "FP32")
    ginp.set_data_from_numpy(x)
    got = grpcclient.InferenceServerClient(server.grpc_url).infer("wide", [ginp]).as_numpy("y")
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    copy = server.var_dir / "run" / "weights" / server.sha256
    weights = copy / "weights.bin"
    assert weights.stat().st_size >= server.weight.nbytes
    assert sorted(server.copy_at_start) == ["model.onnx", "weights.bin"]  # written at start, by the import
    assert _files(copy) == server.copy_at_start  # the requests' loads mapped it, none rewrote it
    if server.devices:  # worker mode: the worker's session maps the copy the front end wrote
        assert _mapping(server.worker_processes["cpu"].pid, weights)
    else:
        mapping = [pid for pid in process_tree(server.process.pid) if _mapping(pid, weights)]
        assert len(mapping) >= 2, mapping  # the gRPC process and at least one HTTP process, one file
    # The small model loads as it is: no copy of it.
    small = httpclient.InferenceServerClient(server.http_url)
    inp = httpclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(np.ones((1, 4), np.float32))
    np.testing.assert_array_equal(small.infer("small", [inp]).as_numpy("y"), np.full((1, 4), 3.0, np.float32))
    assert sorted(p.name for p in copy.parent.iterdir() if not p.name.startswith(".")) == [server.sha256]


def test_the_copy_goes_with_its_version(server):
    copy = server.var_dir / "run" / "weights" / server.sha256
    assert copy.is_dir()
    manage(server, "delete_version", "wide", "1")
    assert wait_for(lambda: not copy.exists(), timeout=15), list(copy.parent.iterdir())
