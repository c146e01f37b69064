"""config.pbtxt parsing (protobuf text format; Triton's JSON form): every supported field kept, the others refused by name."""

import pytest

from models_store.config.triton import ConfigError, parse_config, parse_config_json, same_config


def test_full_config():
    config = parse_config(
        """
        name: "m"
        platform: "onnxruntime_onnx"
        max_batch_size: 16
        version_policy: { latest: { num_versions: 2 } }
        input [
          { name: "a" data_type: TYPE_FP32 dims: [ 3, -1 ] },
          { name: "b" data_type: TYPE_STRING dims: [ 1 ] }
        ]
        output [ { name: "y" data_type: TYPE_INT64 dims: [ 1 ] label_filename: "labels.txt" } ]
        instance_group [ { name: "g" kind: KIND_GPU count: 2 gpus: [ 0, 1 ] }, { kind: KIND_CPU } ]
        default_model_filename: "net.onnx"
        parameters { key: "k" value: { string_value: "v" } }
        """
    )
    assert config.name == "m" and config.platform == "onnxruntime_onnx"
    assert config.max_batch_size == 16
    assert (config.policy, config.latest_versions) == ("latest", 2)
    assert [(t.name, t.datatype, t.dims) for t in config.inputs] == [("a", "FP32", (3, -1)), ("b", "BYTES", (1,))]
    assert config.outputs[0].label_filename == "labels.txt"
    assert config.instance_group == (
        {"name": "g", "kind": "KIND_GPU", "count": 2, "gpus": [0, 1]},
        {"name": "", "kind": "KIND_CPU", "count": 1, "gpus": []},
    )
    assert config.default_model_filename == "net.onnx"
    assert config.parameters == {"k": "v"}


@pytest.mark.parametrize(
    "text,policy,latest,specific",
    [
        ("", "latest", 1, ()),
        ("version_policy: { all: {} }", "all", 1, ()),
        ("version_policy: { specific: { versions: [1, 3] } }", "specific", 1, (1, 3)),
        ("version_policy { latest { num_versions: 3 } }", "latest", 3, ()),
    ],
)
def test_version_policies(text, policy, latest, specific):
    config = parse_config(text)
    assert (config.policy, config.latest_versions, config.specific_versions) == (policy, latest, specific)


def test_every_supported_field_parses_in_every_syntax():
    config = parse_config(
        """
        max_batch_size: 4
        # a comment with brackets [ { } ]
        model_warmup [ { name: "w" batch_size: 1 inputs { key: "a" value: { dims: [ 1 ] zero_data: true } } } ]
        dynamic_batching { preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 100 }
        response_cache { enable: false }
        model_transaction_policy { decoupled: false }
        input [ { name: "in[0]" data_type: TYPE_FP16 dims: [ 2 ] } ]
        parameters: { key: "k" value: { string_value: "x[1]" } }
        """
    )
    assert config.max_batch_size == 4
    assert config.inputs[0].name == "in[0]" and config.inputs[0].datatype == "FP16"
    # Kept whole in Triton's JSON form: defaults printed, 64-bit integers as numbers.
    assert config.raw["model_warmup"] == [
        {
            "name": "w",
            "batch_size": 1,
            "count": 0,
            "inputs": {"a": {"data_type": "TYPE_INVALID", "dims": [1], "zero_data": True}},
        }
    ]
    assert config.raw["dynamic_batching"]["max_queue_delay_microseconds"] == 100
    assert config.raw["parameters"] == {"k": {"string_value": "x[1]"}}


@pytest.mark.parametrize(
    "text,needle",
    [
        (
            'optimization { execution_accelerators { gpu_execution_accelerator: [ { name: "tensorrt" } ] } }',
            "not supported by this server: 'optimization': ONNX Runtime's execution providers",
        ),
        ("model_transaction_policy { decoupled: true }", "'model_transaction_policy.decoupled': decoupled models"),
        (
            'input [ { name: "a" is_shape_tensor: true allow_ragged_batch: true } ]',
            "'input.is_shape_tensor': shape tensors are only supported for TensorRT platform, as in Triton; "
            "'input.allow_ragged_batch': ragged batching is not supported",
        ),
        ('input [ { name: "a" reshape: { shape: [ 2 ] } } ]', "'input.reshape': give the model's own shape in dims"),
        ("instance_group [ { count: 1 rate_limiter { priority: 2 } } ]", "'instance_group.rate_limiter'"),
        ('ensemble_scheduling { step [ { model_name: "a" } ] }', 'ensemble_scheduling is for platform "ensemble" only'),
        ('platform: "ensemble"', "an ensemble needs ensemble_scheduling with at least one step"),
        (
            'platform: "ensemble" ensemble_scheduling { step [ { model_name: "a" model_namespace: "n" } ] }',
            "'ensemble_scheduling.step.model_namespace': model namespaces are not supported",
        ),
        (
            'platform: "ensemble" response_cache { enable: true } ensemble_scheduling { step [ { model_name: "a" } ] }',
            "an ensemble may not set 'response_cache'",
        ),
        (
            'platform: "ensemble" input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ] '
            'output [ { name: "Y" data_type: TYPE_FP32 } ] ensemble_scheduling { step [ { model_name: "a" } ] }',
            "ensemble output 'Y' needs its data_type and dims",
        ),
        (
            'platform: "ensemble" input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ] '
            'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ] '
            'ensemble_scheduling { step [ { model_name: "a" model_version: 0 } ] }',
            "ensemble step 1: model_version is -1 (the version serving now) or a version number",
        ),
        (
            'platform: "ensemble" input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ] '
            'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ] '
            'ensemble_scheduling { step [ { model_name: "a" model_version: -1 input_map { key: "x" value: "X" } } ] }',
            "ensemble step 1 (model 'a') needs an input_map and an output_map",
        ),
        ('runtime: "model.py"', "'runtime': this server runs ONNX models"),
        ('metric_tags { key: "a" value: "b" }', "'metric_tags'"),
        (
            "some_future_field: 1",
            "1:1: ModelConfig has no field 'some_future_field' (not a Triton model configuration field)",
        ),
        ('input [ { name: "a" shapes: [ 1 ] } ]', "ModelInput has no field 'shapes'"),
        ('platform: "tensorrt_plan"', "config.pbtxt asks for 'tensorrt_plan'; this server runs ONNX models"),
        ('input [ { name: "a" format: FORMAT_NCHW dims: [ 3, 4 ] } ]', "model input NHWC/NCHW require 3 dims"),
        (
            'max_batch_size: 2 dynamic_batching { } input [ { name: "a" optional: true } ]',
            "optional inputs cannot be dynamically batched",
        ),
    ],
)
def test_unsupported_fields_are_refused_by_name(text, needle):
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    assert str(info.value).startswith("config.pbtxt") and needle in str(info.value), str(info.value)


def test_sequence_batching_is_kept():
    """Kept whole (sequence batching reads it), never refused."""
    config = parse_config(
        """
        max_batch_size: 1
        sequence_batching {
          max_sequence_idle_microseconds: 5000000
          oldest { max_candidate_sequences: 4 }
          control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
          state [ { input_name: "IN_STATE" output_name: "OUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] } ]
        }
        """
    )
    batching = config.raw["sequence_batching"]
    assert batching["max_sequence_idle_microseconds"] == 5000000 and batching["oldest"]["max_candidate_sequences"] == 4
    assert batching["control_input"][0]["control"][0]["int32_false_true"] == [0, 1]
    assert batching["state"][0]["dims"] == [1]


def test_json_form_as_a_load_sends_it():
    config = parse_config_json('{"max_batch_size": "16", "input": [{"name": "x", "format": "FORMAT_NCHW"}]}')
    assert config.max_batch_size == 16 and config.inputs[0].format == "FORMAT_NCHW"
    with pytest.raises(ConfigError, match='no field named "max_batch"'):
        parse_config_json('{"max_batch": 16}')
    with pytest.raises(ConfigError, match="'optimization'"):
        parse_config_json('{"optimization": {"priority": "PRIORITY_MAX"}}')


@pytest.mark.parametrize("text", ["max_batch_size: 'x'", "input [ { name: } ]", "max_batch_size: -1"])
def test_malformed_config(text):
    with pytest.raises(ConfigError, match=r"config\.pbtxt"):
        parse_config(text)


def test_a_config_kept_in_the_older_json_form_is_the_same_config():
    """Configs stored before every field was kept (no defaults, 64-bit
    integers as strings) compare equal to today's form of the same text:
    an import does not re-apply them (which would undo a policy changed in
    the web UI)."""
    text = (
        'max_batch_size: 8\ninput [ { name: "x" dims: [ 4 ] } ]\ndynamic_batching { max_queue_delay_microseconds: 100 }'
    )
    older = {
        "max_batch_size": 8,
        "input": [{"name": "x", "dims": ["4"]}],
        "dynamic_batching": {"max_queue_delay_microseconds": "100"},
    }
    assert same_config(parse_config(text).raw, older)
    assert not same_config(parse_config(text.replace("100", "200")).raw, older)


def test_the_response_cache_is_read_and_kept():
    config = parse_config("response_cache { enable: true }")
    assert config.response_cache is True and config.raw["response_cache"] == {"enable": True}
    assert parse_config("").response_cache is False
