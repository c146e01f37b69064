"""The model repository used by the data-plane and interop tests."""

from __future__ import annotations

from pathlib import Path

from models_store.management import demo_text
from tests.support import onnx_models as m

BATCHED_CONFIG = """name: "affine"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
model_warmup [ { name: "w" batch_size: 1 inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]
"""

ALL_POLICY = """version_policy: { all: { } }
"""

#: Dynamic batching as Triton configures it (tests/interop/test_batching.py).
DYNAMIC_BATCHING = """max_batch_size: 8
dynamic_batching {{ max_queue_delay_microseconds: {delay} }}
"""


#: Triton's example sequence models (server docs/examples/model_repository), run by the
#: sequence tests (tests/interop/test_sequences.py); an accumulator with implicit state.
_DYNA = "oldest { max_candidate_sequences: 1024 max_queue_delay_microseconds: 10000 }"
_DYNA_KINDS = ("START", "END", "READY")
_ONE_INT32 = 'input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
_STATE = 'state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] %s } ]'
SEQUENCE_MODELS = {
    "simple_sequence": (m.sequence_simple(), m.sequence_config("simple_sequence", extra=_ONE_INT32)),
    "simple_dyna_sequence": (
        m.sequence_simple(corrid="UINT64"),
        m.sequence_config(
            "simple_dyna_sequence",
            strategy=_DYNA,
            kinds=_DYNA_KINDS,
            corrid="UINT64",
            idle_us=10_000_000,
            extra="instance_group [ { count: 2 kind: KIND_CPU } ]\n",
        ),
    ),
    "simple_string_dyna_sequence": (
        m.sequence_string_accumulator(),
        m.sequence_config(
            "simple_string_dyna_sequence",
            strategy=_DYNA,
            kinds=_DYNA_KINDS,
            corrid="STRING",
            idle_us=10_000_000,
            state=_STATE % "",
        ),
    ),
    "seq_accumulator": (
        m.sequence_accumulator(),
        m.sequence_config("seq_accumulator", kinds=("START",), state=_STATE % ""),
    ),
    "seq_accumulator_zero": (
        m.sequence_accumulator(start_control=False),
        m.sequence_config(
            "seq_accumulator_zero",
            kinds=(),
            strategy="oldest { max_candidate_sequences: 8 }",
            state=_STATE % 'initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zeros" }',
            extra='output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }, '
            '{ name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] } ]\n',
        ),
    ),
    "seq_idle": (m.sequence_simple(), m.sequence_config("seq_idle", idle_us=200_000)),
}


#: Every config.pbtxt field this server supports, each with a value other than
#: its default (tests/interop/test_model_config.py): an image classifier as
#: Triton's image_client expects one (one FORMAT_NCHW input of 3 dims, one
#: FP32 output with a label file).
CLASSIFIER_CONFIG = """name: "classifier_nchw"
platform: "onnxruntime_onnx"
backend: "onnxruntime"
max_batch_size: 4
version_policy: { specific: { versions: [ 1 ] } }
input [ { name: "image" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 8, 8 ] } ]
output [ { name: "scores" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "classes.txt" } ]
instance_group [ { name: "pair" kind: KIND_CPU count: 2 } ]
dynamic_batching { preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 500 preserve_ordering: true }
default_model_filename: "model.onnx"
parameters { key: "note" value: { string_value: "made in a test" } }
model_warmup [ {
  name: "zeros" batch_size: 2 count: 1
  inputs { key: "image" value: { data_type: TYPE_FP32 dims: [ 3, 8, 8 ] zero_data: true } }
} ]
model_transaction_policy { decoupled: false }
response_cache { enable: false }
"""
CLASSIFIER_LABELS = ["cat", "dog", "bird", "fish"]

#: An input a request may leave out (its default: the model's initializer).
OPTIONAL_CONFIG = """input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 4 ] }, { name: "scale" optional: true } ]
"""


#: Priority levels and queue policies (tests/interop/test_queue_policy.py): y = 5x + 1 in batches of up to 4,
#: one-row requests held 1 s for a fuller batch; level 1 plain, 2 (the default) DELAY, 3 holds one request,
#: 4 REJECT; a request may shorten the 30 s queue timeout of levels 2 and 4.
QUEUE_POLICY_CONFIG = """max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching {
  preferred_batch_size: [ 4 ]
  max_queue_delay_microseconds: 1000000
  priority_levels: 4
  default_priority_level: 2
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 30000000 allow_timeout_override: true }
  priority_queue_policy { key: 1 value: { } }
  priority_queue_policy { key: 3 value: { max_queue_size: 1 } }
  priority_queue_policy {
    key: 4
    value: { timeout_action: REJECT default_timeout_microseconds: 30000000 allow_timeout_override: true }
  }
}
instance_group [ { kind: KIND_CPU count: 1 } ]
"""


#: Changed by repository loads with a config (tests/interop/test_model_config.py).
RECONFIGURED_CONFIG = """max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { max_queue_delay_microseconds: 100 }
instance_group [ { kind: KIND_CPU count: 2 } ]
parameters { key: "p" value: { string_value: "v" } }
"""


def diabetes_regressor() -> bytes:
    """LinearRegression on scikit-learn's bundled diabetes data; output "variable" [N, 1]."""
    import numpy as np
    from skl2onnx import to_onnx
    from sklearn.datasets import load_diabetes
    from sklearn.linear_model import LinearRegression

    data = load_diabetes()
    features = data.data.astype(np.float32)
    estimator = LinearRegression().fit(features, data.target)
    onnx_model = to_onnx(estimator, features[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    onnx_model.graph.input[0].name = "input"
    for node in onnx_model.graph.node:
        node.input[:] = ["input" if i == "X" else i for i in node.input]
    return onnx_model.SerializeToString()


def _ensemble(name: str, inputs: str, outputs: str, steps: list[tuple], max_batch_size: int = 0) -> str:
    """An ensemble's config.pbtxt; ``steps``: (model, version, {input: tensor}, {output: tensor})."""

    def pairs(mapping: dict) -> str:
        return ", ".join(f'{{ key: "{k}" value: "{v}" }}' for k, v in mapping.items())

    lines = [
        f'  {{ model_name: "{model}" model_version: {version} input_map [ {pairs(ins)} ] output_map [ {pairs(outs)} ] }}'
        for model, version, ins, outs in steps
    ]
    return (
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: {max_batch_size}\n'
        f"input [ {inputs} ]\noutput [ {outputs} ]\n"
        "ensemble_scheduling { step [\n" + ",\n".join(lines) + "\n] }\n"
    )


#: Ensembles (tests/interop/test_ensembles.py): each directory holds config.pbtxt and an empty "1/", as in Triton.
ENSEMBLES = {
    # preprocess -> classifier -> postprocess (the first two pinned at import: -1)
    "ens_pipeline": _ensemble(
        "ens_pipeline",
        '{ name: "RAW" data_type: TYPE_FP32 dims: [ 4 ] }',
        '{ name: "PROBABILITIES" data_type: TYPE_FP32 dims: [ 3 ] }, { name: "LABEL" data_type: TYPE_INT64 dims: [ ] }',
        [
            ("ens_preprocess", -1, {"raw": "RAW"}, {"features": "features"}),
            ("ens_classifier", -1, {"features": "features"}, {"logits": "logits"}),
            ("ens_postprocess", 1, {"logits": "logits"}, {"probabilities": "PROBABILITIES", "label": "LABEL"}),
        ],
        max_batch_size=8,
    ),
    # a diamond: preprocess, then two independent steps, then their join
    "ens_diamond": _ensemble(
        "ens_diamond",
        '{ name: "RAW" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
        '{ name: "SUM" data_type: TYPE_FP32 dims: [ -1, 4 ] }, { name: "LEFT" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
        [
            ("ens_preprocess", -1, {"raw": "RAW"}, {"features": "f"}),
            ("ens_double", -1, {"x": "f"}, {"y": "LEFT"}),
            ("ens_negate", -1, {"x": "f"}, {"y": "right"}),
            ("ens_join", -1, {"a": "LEFT", "b": "right"}, {"sum": "SUM"}),
        ],
    ),
    # its second step takes batches of exactly 2: other batches fail there
    "ens_failing": _ensemble(
        "ens_failing",
        '{ name: "RAW" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
        '{ name: "OUT" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
        [("ens_preprocess", -1, {"raw": "RAW"}, {"features": "f"}), ("ens_fixed_batch", -1, {"x": "f"}, {"y": "OUT"})],
    ),
    # used by the statistics test only, so that its counts are exact
    "ens_stats": _ensemble(
        "ens_stats",
        '{ name: "X" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
        '{ name: "Y" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
        [("ens_stats_a", -1, {"x": "X"}, {"y": "t"}), ("ens_stats_b", -1, {"x": "t"}, {"y": "Y"})],
    ),
    # used by the Triton metrics test only (tests/interop/test_triton_metrics.py), so that its counts are exact
    "ens_metrics": _ensemble(
        "ens_metrics",
        '{ name: "X" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
        '{ name: "Y" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
        [("ens_metrics_a", -1, {"x": "X"}, {"y": "t"}), ("ens_metrics_b", -1, {"x": "t"}, {"y": "Y"})],
    ),
    # a chain of three models of its own (exact statistics); the middle one takes batches of exactly 2
    "ens_chain": _ensemble(
        "ens_chain",
        '{ name: "X" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
        '{ name: "Y" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
        [
            ("ens_chain_a", -1, {"x": "X"}, {"y": "a"}),
            ("ens_chain_b", -1, {"x": "a"}, {"y": "b"}),
            ("ens_chain_c", -1, {"x": "b"}, {"y": "Y"}),
        ],
    ),
}


def write_ensembles(root: Path) -> None:
    """The composing models of :data:`ENSEMBLES` and the ensembles themselves."""
    m.write_model(root, "ens_preprocess", m.standardize())
    m.write_model(root, "ens_classifier", m.linear_classifier())
    m.write_model(root, "ens_postprocess", m.softmax_argmax())
    m.write_model(root, "ens_double", m.affine(2.0, 1.0))
    m.write_model(root, "ens_negate", m.affine(-1.0, 3.0))
    m.write_model(root, "ens_join", m.add_pair())
    m.write_model(root, "ens_fixed_batch", m.affine(1.0, 0.5, batch=2))
    m.write_model(root, "ens_stats_a", m.affine(1.0, 1.0))
    m.write_model(root, "ens_stats_b", m.affine(2.0, 0.0))
    m.write_model(root, "ens_metrics_a", m.affine(1.0, 1.0))
    m.write_model(root, "ens_metrics_b", m.affine(2.0, 0.0))
    m.write_model(root, "ens_chain_a", m.affine(1.0, 1.0))
    m.write_model(root, "ens_chain_b", m.affine(1.0, 0.5, batch=2))
    m.write_model(root, "ens_chain_c", m.affine(2.0, 0.0))
    for name, config in ENSEMBLES.items():
        (root / name / "1").mkdir(parents=True, exist_ok=True)
        (root / name / "config.pbtxt").write_text(config)


def build_test_repository(root: Path, with_sklearn: bool = True) -> Path:
    """identity_<datatype> for all 13 datatypes, simple (INT32 add/sub),
    simple_string (the same on integers in text), affine (y = 2x + 1, max_batch_size 8), versioned (v1: x + 1, v2: x + 2,
    policy all), strings (text + "!"; strings_one: of shape [1]), image ([1,3,224,224] -> channel means),
    broken (not ONNX), cached (y = 4x - 2 with the response cache), the
    ensembles of ENSEMBLES with their composing models, the demo
    sentence_embedding (ONNX Runtime Extensions' tokenizer inside), the
    stateful models of SEQUENCE_MODELS, and iris/digits
    from scikit-learn when ``with_sklearn``."""
    for datatype in m.ALL_DATATYPES:
        m.write_model(root, f"identity_{datatype.lower()}", m.identity(datatype))
    m.write_model(root, "simple", m.add_sub("INT32"))
    m.write_model(root, "simple_string", m.add_sub_strings())  # Triton's examples (shared memory tests)
    m.write_model(root, "affine", m.affine(2.0, 1.0), config=BATCHED_CONFIG)
    m.write_model(root, "versioned", m.affine(1.0, 1.0), version=1, config=ALL_POLICY)
    m.write_model(root, "versioned", m.affine(1.0, 2.0), version=2)
    m.write_model(root, "strings", m.string_suffix("!"))
    m.write_model(root, "strings_one", m.string_suffix("!", shape=(1,)))  # a raw binary request's BYTES input
    m.write_model(root, "image", m.fixed_image())
    m.write_model(root, "broken", b"this is not an onnx model")
    m.write_model(root, "half_plus_two", m.half_plus_two(rank=1))
    m.write_model(root, "half_plus_two_2d", m.half_plus_two(rank=2))
    m.write_model(root, "tag_signal_sensor", m.tag_signal_sensor())
    m.write_model(root, "pair_classifier", m.two_input_classifier())
    m.write_model(root, "slow", m.slow_loop())
    # Used only by the statistics / metrics tests, so their counts are exact.
    m.write_model(root, "stats_probe", m.affine(1.0, 0.0), config=BATCHED_CONFIG.replace('"affine"', '"stats_probe"'))
    m.write_model(root, "repo_probe", m.identity("FP32"))
    metrics_config = BATCHED_CONFIG.replace('"affine"', '"metrics_probe"')
    m.write_model(root, "metrics_probe", m.affine(3.0, 1.0), config=metrics_config)  # Triton's metrics test only
    # perf_analyzer --streaming only (tests/interop/test_grpc_stream.py), so that its server counts are exact.
    m.write_model(root, "stream_probe", m.affine(2.0, 1.0), config=BATCHED_CONFIG.replace('"affine"', '"stream_probe"'))
    m.write_model(root, "audited", m.identity("FP32"))  # repository load/unload audit
    m.write_model(root, "file_loaded", m.identity("FP32"))  # versions added by loads with file: (test_triton_qa.py)
    # Dynamic batching: y = 3x - 1 batched within 20 ms; a gather table over [N, K] (any K); a 2 s window.
    m.write_model(root, "batched", m.affine(3.0, -1.0), config=DYNAMIC_BATCHING.format(delay=20000))
    m.write_model(root, "batched_gather", m.gather_table(), config=DYNAMIC_BATCHING.format(delay=20000))
    m.write_model(root, "batched_slow", m.affine(1.0, 0.0), config=DYNAMIC_BATCHING.format(delay=2000000))
    m.write_model(root, "queue_policy", m.affine(5.0, 1.0), config=QUEUE_POLICY_CONFIG)
    for name, (payload, config) in SEQUENCE_MODELS.items():
        m.write_model(root, name, payload, config=config)
    # The whole model configuration (tests/interop/test_model_config.py).
    m.write_model(root, "classifier_nchw", m.channel_classifier(), config=CLASSIFIER_CONFIG)
    (root / "classifier_nchw" / "classes.txt").write_text("\n".join(CLASSIFIER_LABELS) + "\n")
    m.write_model(root, "optional_scale", m.scaled_by_default(2.0), config=OPTIONAL_CONFIG)
    m.write_model(root, "reconfigured", m.affine(1.0, 0.5), config=RECONFIGURED_CONFIG)
    # The response cache (tests/interop/test_response_cache.py): y = 4x - 2, answers kept.
    m.write_model(root, "cached", m.affine(4.0, -2.0), config="response_cache { enable: true }\n")
    # Text in, embedding out, the tokenizer inside (ONNX Runtime Extensions; tests/interop/test_ort_extensions.py).
    m.write_model(root, "sentence_embedding", demo_text.build_sentence_encoder(), config=demo_text.CONFIG)
    write_ensembles(root)  # tests/interop/test_ensembles.py
    if with_sklearn:
        from models_store.management.commands.build_demo_repository import CONFIG, build_models

        for name, (payload, features) in build_models().items():
            m.write_model(root, name, payload, config=CONFIG.format(name=name, features=features))
        m.write_model(root, "diabetes", diabetes_regressor())
    return root
