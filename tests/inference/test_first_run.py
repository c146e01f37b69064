"""A version without ``model_warmup`` runs zeros once per instance at load
(SESSION_FIRST_RUN; inference/runtime/warmup.py ``first_run``): real ONNX
Runtime sessions of models built in code, expected values from numpy."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from inference.runtime.execution import RunTarget
from inference.runtime.onnx import OnnxModel
from inference.runtime.runner import ModelRunner
from inference.runtime.warmup import FIRST_RUN_MAX_BYTES, FIRST_RUN_MAX_MODEL_BYTES, WarmupInput, WarmupSample
from tests.support import onnx_models as m


class Recording(OnnxModel):
    """An OnnxModel that keeps the feeds of every run."""

    def __init__(self, payload: bytes):
        super().__init__(ort.InferenceSession(payload, providers=["CPUExecutionProvider"]))
        self.feeds: list[dict] = []

    def run(self, feeds, output_names, run_options=None):
        self.feeds.append({k: np.array(v, copy=True) for k, v in feeds.items()})
        return super().run(feeds, output_names, run_options)


def _runner(payload: bytes, first_run: bool = True) -> tuple[ModelRunner, list[Recording]]:
    made: list[Recording] = []

    def load(target: RunTarget) -> OnnxModel:
        made.append(Recording(payload))
        return made[-1]

    return ModelRunner(load, first_run=first_run), made


def _target(instances: int = 1, size: int = 100, **kwargs) -> RunTarget:
    return RunTarget("m", 1, "sha-m", "m", size, instances=instances, **kwargs)


def _int_division() -> bytes:
    """INT32 z = x / y, shapes [N, 2]: zeros fail (integer division by zero)."""
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT32, ["N", 2]) for n in ("x", "y")]
    graph = helper.make_graph(
        [helper.make_node("Div", ["x", "y"], ["z"])], "g", inputs,
        [helper.make_tensor_value_info("z", TensorProto.INT32, ["N", 2])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_each_instance_runs_zeros_once_at_load_before_the_first_request():
    runner, made = _runner(m.affine(2.0, 1.0))  # x: FP32 [N, 4], N symbolic
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    result = runner.run(_target(instances=2), {"x": x}, ["y"], rows=2)
    np.testing.assert_allclose(result.outputs[0], 2 * x + 1)
    assert len(made) == 2 and runner.counts["first_runs"] == 2
    first = [model.feeds[0]["x"] for model in made]
    for zeros in first:  # the symbolic batch dim as 1, every element 0
        assert zeros.shape == (1, 4) and zeros.dtype == np.float32 and not zeros.any()
    assert sum(len(model.feeds) for model in made) == 3  # two first runs, then the request on one instance
    runner.run(_target(instances=2), {"x": x}, ["y"], rows=2)
    assert runner.counts["first_runs"] == 2  # at load only


def test_a_model_that_zeros_do_not_suit_still_loads_and_serves():
    runner, made = _runner(_int_division())
    x = np.array([[7, 9]], dtype=np.int32)
    y = np.array([[2, 3]], dtype=np.int32)
    result = runner.run(_target(), {"x": x, "y": y}, ["z"], rows=1)
    np.testing.assert_array_equal(result.outputs[0], x // y)
    assert runner.counts["first_runs"] == 0 and runner.counts["loads"] == 1
    assert len(made[0].feeds) == 2  # the failed first run, then the request


def test_no_first_run_for_strings_large_inputs_big_versions_configured_warmups_or_when_off():
    strings, made = _runner(m.string_suffix())
    strings.run(_target(), {"text": np.array([b"a"], dtype=object)}, ["out"], rows=1)
    assert strings.counts["first_runs"] == 0 and len(made[0].feeds) == 1

    side = int((FIRST_RUN_MAX_BYTES // 4) ** 0.5) + 1  # FP32 [side, side]: over the cap
    large, made = _runner(m.identity("FP32", shape=(side, side)))
    large.run(_target(), {"INPUT0": np.ones((side, side), dtype=np.float32)}, ["OUTPUT0"], rows=1)
    assert large.counts["first_runs"] == 0 and len(made[0].feeds) == 1

    big, made = _runner(m.affine(2.0, 1.0))  # a version as big as the cap (its target's size)
    big.run(_target(size=FIRST_RUN_MAX_MODEL_BYTES), {"x": np.ones((1, 4), dtype=np.float32)}, ["y"], rows=1)
    assert big.counts["first_runs"] == 0 and len(made[0].feeds) == 1

    sample = WarmupSample("ones", 1, 1, (WarmupInput("x", "FP32", (4,)),), batched=True)
    configured, made = _runner(m.affine(2.0, 1.0))
    configured.run(_target(warmup=(sample,)), {"x": np.ones((1, 4), dtype=np.float32)}, ["y"], rows=1)
    assert (configured.counts["warmups"], configured.counts["first_runs"]) == (1, 0)

    off, made = _runner(m.affine(2.0, 1.0), first_run=False)
    off.run(_target(), {"x": np.ones((1, 4), dtype=np.float32)}, ["y"], rows=1)
    assert off.counts["first_runs"] == 0 and len(made[0].feeds) == 1
