"""config.pbtxt parsing (protobuf text format, unknown fields ignored)."""

import pytest

from models_store.config import ConfigError, parse_config


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


def test_unknown_fields_are_ignored_in_every_syntax():
    config = parse_config(
        """
        max_batch_size: 4
        # a comment with brackets [ { } ]
        optimization { execution_accelerators { gpu_execution_accelerator: [ { name: "tensorrt" } ] } }
        model_warmup [ { name: "w" batch_size: 1 inputs { key: "a" value: { dims: [ 1 ] zero_data: true } } } ]
        dynamic_batching { preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 100 }
        response_cache { enable: true }
        some_future_field: "x[1]"
        input [ { name: "in[0]" data_type: TYPE_FP16 dims: [ 2 ] } ]
        """
    )
    assert config.max_batch_size == 4
    assert config.inputs[0].name == "in[0]" and config.inputs[0].datatype == "FP16"


@pytest.mark.parametrize("text", ["max_batch_size: 'x'", "input [ { name: } ]", "max_batch_size: -1"])
def test_malformed_config(text):
    with pytest.raises(ConfigError, match=r"config\.pbtxt"):
        parse_config(text)
