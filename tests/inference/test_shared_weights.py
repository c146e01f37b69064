"""Big models' weights memory-mapped from one copy per machine
(inference/runtime/shared_weights.py): the copy computes what the original
does, its weights lie at aligned offsets, it is made once however many
processes ask at once, and two processes' sessions share its pages."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from inference.runtime import shared_weights as sw
from inference.runtime.onnx import create_session


def _matmul_model(path: Path, rows: int, columns: int, seed: int = 0) -> np.ndarray:
    """y = x @ W + b (W [rows, columns] big, b [columns] small) saved inline at ``path``; returns W."""
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((rows, columns), dtype=np.float32)
    bias = np.arange(columns, dtype=np.float32)[:8].repeat(columns // 8)  # small: stays inline
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, rows])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, columns])],
        initializer=[numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return weight


def test_the_copy_computes_what_the_original_does_with_aligned_weights(tmp_path):
    weight = _matmul_model(tmp_path / "src" / "model.onnx", 64, 512)
    copy = sw.machine_copy(tmp_path / "src" / "model.onnx", "abc", tmp_path / "weights", min_bytes=1)
    assert copy == tmp_path / "weights" / "abc" / "model.onnx"
    model = onnx.load(str(copy), load_external_data=False)
    tensors = {t.name: t for t in model.graph.initializer}
    assert tensors["w"].data_location == TensorProto.EXTERNAL and tensors["b"].data_location == TensorProto.DEFAULT
    info = {e.key: e.value for e in tensors["w"].external_data}
    assert info["location"] == "weights.bin" and int(info["offset"]) % sw.ALIGNMENT == 0
    assert int(info["length"]) == weight.nbytes
    stored = np.fromfile(copy.parent / "weights.bin", dtype=np.float32, offset=int(info["offset"]), count=weight.size)
    np.testing.assert_array_equal(stored.reshape(weight.shape), weight)
    x = np.random.default_rng(1).standard_normal((3, 64), dtype=np.float32)
    bias = np.arange(512, dtype=np.float32)[:8].repeat(64)
    (y,) = create_session(copy, shared_weights=True).run(None, {"x": x})
    np.testing.assert_allclose(y, x @ weight + bias, rtol=1e-4, atol=1e-4)


def test_small_models_load_as_they_are(tmp_path):
    _matmul_model(tmp_path / "src" / "model.onnx", 8, 8)
    source = tmp_path / "src" / "model.onnx"
    assert sw.machine_copy(source, "abc", tmp_path / "weights", min_bytes=1 << 20) == source
    assert sw.machine_copy(source, "abc", tmp_path / "weights", min_bytes=0) == source
    assert not (tmp_path / "weights").exists()


def _copy_in_a_process(args) -> str:
    source, root = args
    return str(sw.machine_copy(Path(source), "same", Path(root), min_bytes=1))


def test_processes_asking_at_once_make_one_copy(tmp_path):
    _matmul_model(tmp_path / "src" / "model.onnx", 256, 1024)
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        paths = pool.map(_copy_in_a_process, [(str(tmp_path / "src" / "model.onnx"), str(tmp_path / "w"))] * 8)
    assert set(paths) == {str(tmp_path / "w" / "same" / "model.onnx")}
    assert sorted(p.name for p in (tmp_path / "w").iterdir() if not p.name.startswith(".")) == ["same"]
    assert not [p for p in (tmp_path / "w").iterdir() if p.is_dir() and p.name.startswith(".")]  # no staging left


_HOLD = textwrap.dedent(
    """
    import sys, numpy as np
    sys.path.insert(0, sys.argv[3])
    from inference.runtime.onnx import create_session
    session = create_session(sys.argv[1], shared_weights=sys.argv[2] == "1")
    session.run(None, {"x": np.ones((1, 1024), np.float32)})
    print("ready", flush=True)
    sys.stdin.readline()
    """
)


def _pss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no Pss")


def _two_sessions_pss(path: Path, shared: bool) -> float:
    root = str(Path(__file__).resolve().parents[2])
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _HOLD, str(path), "1" if shared else "0", root],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        assert [p.stdout.readline().strip() for p in procs] == ["ready", "ready"]
        return sum(_pss_mib(p.pid) for p in procs)
    finally:
        for p in procs:
            p.stdin.write("\n")
            p.stdin.flush()
            p.wait(30)


@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="Linux only")
def test_two_processes_sessions_share_one_copy_of_the_weights(tmp_path):
    """64 MiB of weights in two processes: inline, each holds its own (2 x 64
    MiB above what the processes need anyway); from the machine's copy, the
    page cache's pages count half to each (1 x 64 MiB in all)."""
    _matmul_model(tmp_path / "src" / "model.onnx", 1024, 16384)  # 64 MiB
    copy = sw.machine_copy(tmp_path / "src" / "model.onnx", "big", tmp_path / "w", min_bytes=1)
    inline = _two_sessions_pss(tmp_path / "src" / "model.onnx", shared=False)
    shared = _two_sessions_pss(copy, shared=True)
    assert inline - shared > 48, (inline, shared)  # about 64 MiB less: one copy instead of two


def test_raw_data_spans_point_at_each_initializers_bytes_in_the_file(tmp_path):
    """The framing walk finds each main-graph initializer's raw_data in the
    file (copied from there, never through memory); one held as float_data
    has none (its values are converted) and the copy still computes x @ W + V."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((64, 512), dtype=np.float32)
    v = rng.standard_normal((64, 512), dtype=np.float32)
    typed = helper.make_tensor("v", TensorProto.FLOAT, v.shape, v.ravel().tolist())  # float_data, no raw_data
    graph = helper.make_graph(
        [helper.make_node("Add", ["w", "v"], ["s"]), helper.make_node("MatMul", ["x", "s"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 512])],
        initializer=[numpy_helper.from_array(w, "w"), typed],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    source = tmp_path / "src" / "model.onnx"
    source.parent.mkdir()
    source.write_bytes(model.SerializeToString())
    spans = sw._raw_data_spans(source, 2)
    assert spans[1] is None
    start, length = spans[0]
    assert source.read_bytes()[start : start + length] == w.tobytes()
    copy = sw.machine_copy(source, "spans", tmp_path / "w", min_bytes=1)
    x = rng.standard_normal((2, 64), dtype=np.float32)
    (y,) = create_session(copy, shared_weights=True).run(None, {"x": x})
    np.testing.assert_allclose(y, x @ (w + v), rtol=1e-4, atol=1e-3)
