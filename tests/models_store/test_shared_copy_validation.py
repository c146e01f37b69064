"""A big version is READY with this machine's copy of its weights written
(issue 39, item 5): validation writes the copy with memory-mapped weights
(inference/runtime/shared_weights.py) and validates the session made from
it, so that the first request's load only maps it. With the threshold at
1 MiB: a 4 MiB model with its weights inline, and one with them in an
external data file (copied file to file). Through the management API."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, external_data_helper, helper, numpy_helper

from inference.runtime.execution import RunTarget
from inference.runtime.executors import session_loader
from inference.runtime.shared_weights import ALIGNMENT, Sharing
from models_store.accounts import services as accounts
from models_store.intake import validating, validation
from models_store.models import ModelVersion
from models_store.serving import StoreArtifacts
from tests.models_store.test_api import Api
from tests.support import onnx_models as m
from tests.support.store import person

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]

ROWS, COLUMNS = 256, 4096  # 4 MiB of FP32 weights
MIN_BYTES = 1 << 20


def _model(weight: np.ndarray, bias: np.ndarray, external: str | None = None) -> bytes:
    """y = x @ W + b, x FP32 [N, ROWS]; W inline, or in the data file ``external`` (write W's bytes there)."""
    tensor = numpy_helper.from_array(weight, "w")
    if external:
        external_data_helper.set_external_data(tensor, location=external, offset=0, length=weight.nbytes)
        tensor.ClearField("raw_data")
        tensor.data_location = TensorProto.EXTERNAL
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", ROWS])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", COLUMNS])],
        initializer=[tensor, numpy_helper.from_array(bias, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _named(content: bytes, name: str) -> io.BytesIO:
    handle = io.BytesIO(content)
    handle.name = name
    return handle


@pytest.fixture
def sharing(tmp_path):
    """This process validates with copies under tmp_path/weights from 1 MiB (restored afterwards)."""
    before = validating.current_validator()
    shared = Sharing(tmp_path / "weights", MIN_BYTES)
    validating.configure(validating.Validator(providers=("CPUExecutionProvider",), sharing=shared))
    yield shared
    validating.configure(before)


def _files(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every file under ``root``: relative path -> (inode, size, mtime in ns)."""
    return {
        str(p.relative_to(root)): (p.stat().st_ino, p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("external", [None, "w.data"])
def test_a_big_version_is_ready_with_its_copy_and_the_first_load_only_maps_it(sharing, external):
    rng = np.random.default_rng(7)
    weight = rng.standard_normal((ROWS, COLUMNS), dtype=np.float32)
    bias = rng.standard_normal(COLUMNS, dtype=np.float32)[:16].repeat(COLUMNS // 16)  # 16 KiB: stays inline
    payload = _model(weight, bias, external)
    api = Api(accounts.token_create(user=person("alice", "ml"), name="script")[1])
    files = {"file": _named(payload, "model.onnx")}
    if external:
        files["data"] = [_named(weight.tobytes(), external)]
    response = api.client.post("/api/models/wide/versions/", {**files, "team": "ml"}, **api.auth)
    assert response.status_code == 201, response.content
    answer = response.json()
    assert answer["state"] == "READY", answer
    version = ModelVersion.objects.get(model__name="wide", number=1)
    assert any(line.startswith("this machine's copy with shared weights written") for line in version.log)

    # The copy is there once READY: the graph with W referenced at an aligned offset of weights.bin.
    copy = sharing.root / version.sha256
    assert sorted(p.name for p in copy.iterdir()) == ["model.onnx", "weights.bin"]
    model = onnx.load(str(copy / "model.onnx"), load_external_data=False)
    tensors = {t.name: t for t in model.graph.initializer}
    assert tensors["b"].data_location == TensorProto.DEFAULT
    info = {e.key: e.value for e in tensors["w"].external_data}
    assert info["location"] == "weights.bin" and int(info["offset"]) % ALIGNMENT == 0
    assert int(info["length"]) == weight.nbytes
    stored = np.fromfile(copy / "weights.bin", np.float32, count=weight.size, offset=int(info["offset"]))
    np.testing.assert_array_equal(stored.reshape(weight.shape), weight)
    before = _files(sharing.root)

    # The first request's load (the servers' loader) maps that copy: no file written, none replaced.
    load = session_loader(StoreArtifacts(), shared_weights=(sharing.root, sharing.min_bytes))
    target = RunTarget("wide", 1, version.sha256, version.artifact, version.size)
    session = load(target)
    assert _files(sharing.root) == before
    assert not [p for p in sharing.root.iterdir() if p.is_dir() and p.name.startswith(".")]  # no staging
    x = rng.standard_normal((3, ROWS), dtype=np.float32)
    (y,) = session.run({"x": x}, ["y"])
    np.testing.assert_allclose(y, x.astype(np.float64) @ weight.astype(np.float64) + bias, rtol=1e-4, atol=1e-3)


def test_a_version_below_the_threshold_gets_no_copy(sharing):
    weight = np.ones((ROWS, 64), np.float32)  # 64 KiB
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", ROWS])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 64])],
        initializer=[numpy_helper.from_array(weight, "w")],
    )
    small = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    small.ir_version = 8
    api = Api(accounts.token_create(user=person("alice", "ml"), name="script")[1])
    files = {"file": _named(small.SerializeToString(), "model.onnx"), "team": "ml"}
    response = api.client.post("/api/models/small/versions/", files, **api.auth)
    assert response.status_code == 201 and response.json()["state"] == "READY", response.content
    assert not sharing.root.exists() or not any(sharing.root.iterdir())


@pytest.mark.parametrize("payload", [m.failing_model(), m.unknown_domain_operator()], ids=["checker", "session"])
def test_a_model_that_fails_fails_with_the_same_reason_with_a_copy(tmp_path, payload):
    path = tmp_path / "store" / "model.onnx"
    path.parent.mkdir()
    path.write_bytes(payload)
    with pytest.raises(validation.ValidationError) as plain:
        validation.validate_artifact(path)
    with pytest.raises(validation.ValidationError) as shared:
        validation.validate_artifact(path, sharing=Sharing(tmp_path / "weights", 1), sha256="bad")
    assert str(shared.value) == str(plain.value)
    assert str(tmp_path) not in str(shared.value)  # the model shown as <model dir>, never the copy
