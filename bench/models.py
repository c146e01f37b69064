"""Benchmark models built in code with onnx.helper (no downloads), the
repository they are written to, their sample inputs, and the "floor": the
in-process ``InferenceSession.run`` time that no server can beat.

Models:

* ``tiny``: FP32 x [1, 16] -> y = 2x + 1 [1, 16] (the server's own overhead).
* ``cnn``: FP32 image [1, 3, 224, 224] (602 KB) -> a small real conv net
  (Conv 3->16 s2 + Relu, Conv 16->32 s2 + Relu, Conv 32->32 s1 + Relu,
  GlobalAveragePool, Flatten, Gemm -> 10 logits), seeded random weights;
  about 1 ms per run on one core.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


@dataclass(frozen=True)
class BenchModel:
    """One model of the benchmark repository (single FP32 input and output)."""

    name: str
    input_name: str
    input_shape: tuple[int, ...]
    output_name: str
    output_shape: tuple[int, ...]
    build: Callable[[], bytes]
    seed: int = 0

    @property
    def input_bytes(self) -> int:
        return int(np.prod(self.input_shape)) * 4

    def describe(self) -> str:
        """E.g. ``image [1, 3, 224, 224] (602,112 B) -> logits [1, 10]``."""
        return (
            f"{self.input_name} {list(self.input_shape)} ({self.input_bytes:,} B) -> "
            f"{self.output_name} {list(self.output_shape)}"
        )

    def sample_input(self) -> np.ndarray:
        """The deterministic input every request of the benchmark sends."""
        rng = np.random.default_rng(1000 + self.seed)
        return rng.standard_normal(self.input_shape).astype(np.float32)


def _serialize(nodes, inputs, outputs, initializers=()) -> bytes:
    graph = helper.make_graph(nodes, "bench", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="bench")
    model.ir_version = 8
    return model.SerializeToString()


def build_tiny() -> bytes:
    """x [1, 16] -> y = 2x + 1."""
    init = [
        helper.make_tensor("scale", TensorProto.FLOAT, [], [2.0]),
        helper.make_tensor("offset", TensorProto.FLOAT, [], [1.0]),
    ]
    return _serialize(
        [helper.make_node("Mul", ["x", "scale"], ["t"]), helper.make_node("Add", ["t", "offset"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        initializers=init,
    )


def build_cnn(seed: int = 7) -> bytes:
    """image [1, 3, 224, 224] -> logits [1, 10] through three 3x3 convs (~54 M MACs)."""
    rng = np.random.default_rng(seed)

    def weight(name: str, shape: tuple[int, ...], fan_in: int):
        value = (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        return numpy_helper.from_array(value, name)

    init = [
        weight("w1", (16, 3, 3, 3), 27),
        numpy_helper.from_array(np.zeros(16, np.float32), "b1"),
        weight("w2", (32, 16, 3, 3), 144),
        numpy_helper.from_array(np.zeros(32, np.float32), "b2"),
        weight("w3", (32, 32, 3, 3), 288),
        numpy_helper.from_array(np.zeros(32, np.float32), "b3"),
        weight("w4", (10, 32), 32),
        numpy_helper.from_array(np.zeros(10, np.float32), "b4"),
    ]
    conv = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    same = {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}
    nodes = [
        helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], **conv),  # [1, 16, 112, 112]
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], **conv),  # [1, 32, 56, 56]
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], **same),  # [1, 32, 56, 56]
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("GlobalAveragePool", ["r3"], ["p"]),  # [1, 32, 1, 1]
        helper.make_node("Flatten", ["p"], ["f"], axis=1),  # [1, 32]
        helper.make_node("Gemm", ["f", "w4", "b4"], ["logits"], transB=1),  # [1, 10]
    ]
    return _serialize(
        nodes,
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
        initializers=init,
    )


MODELS: dict[str, BenchModel] = {
    m.name: m
    for m in (
        BenchModel("tiny", "x", (1, 16), "y", (1, 16), build_tiny, seed=1),
        BenchModel("cnn", "image", (1, 3, 224, 224), "logits", (1, 10), build_cnn, seed=2),
    )
}


def write_repository(root: Path, models: list[BenchModel]) -> Path:
    """Write ``root/<name>/1/model.onnx`` for each model (Triton layout, no config)."""
    for model in models:
        target = root / model.name / "1" / "model.onnx"
        target.parent.mkdir(parents=True, exist_ok=True)
        payload = model.build()
        if not target.exists() or target.read_bytes() != payload:
            target.write_bytes(payload)
    return root


def model_path(root: Path, model: BenchModel) -> Path:
    return root / model.name / "1" / "model.onnx"


def session(path: Path) -> ort.InferenceSession:
    """A session configured as the server's (1 intra-op, 1 inter-op thread, all optimizations)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


def reference_output(path: Path, model: BenchModel, x: np.ndarray) -> np.ndarray:
    return session(path).run([model.output_name], {model.input_name: x})[0]


@dataclass(frozen=True)
class Floor:
    median_ms: float
    p99_ms: float
    runs: int


def measure_floor(path: Path, model: BenchModel, seconds: float = 2.0, min_runs: int = 200) -> Floor:
    """Median in-process ``session.run`` time over at least ``min_runs`` runs
    and ``seconds`` of running, after a short warm-up."""
    sess = session(path)
    feed = {model.input_name: model.sample_input()}
    names = [model.output_name]
    warm_until = time.perf_counter() + 0.3
    while time.perf_counter() < warm_until:
        sess.run(names, feed)
    times = []
    stop = time.perf_counter() + seconds
    while len(times) < min_runs or time.perf_counter() < stop:
        started = time.perf_counter()
        sess.run(names, feed)
        times.append(time.perf_counter() - started)
    times.sort()
    return Floor(
        median_ms=statistics.median(times) * 1e3,
        p99_ms=times[min(len(times) - 1, int(len(times) * 0.99))] * 1e3,
        runs=len(times),
    )
