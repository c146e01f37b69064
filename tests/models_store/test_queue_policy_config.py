"""dynamic_batching's priority levels and queue policies in config.pbtxt and
its JSON form: kept as Triton writes them, checked with Triton's rules
(core src/model_config_utils.cc ValidateModelConfig) and messages."""

import json

import pytest

from inference.runtime.queue_policy import PriorityLevels, QueuePolicy
from models_store.config.triton import ConfigError, config_from_raw, parse_config, parse_config_json

FULL = """
max_batch_size: 8
dynamic_batching {
  max_queue_delay_microseconds: 100
  priority_levels: 3
  default_priority_level: 2
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5000 allow_timeout_override: true max_queue_size: 4 }
  priority_queue_policy { key: 1 value: { max_queue_size: 2 } }
  priority_queue_policy {
    key: 3
    value: { timeout_action: REJECT default_timeout_microseconds: 18446744073709551615 }
  }
}
"""


def test_levels_and_policies_are_kept_in_tritons_json_form():
    config = parse_config(FULL)
    batching = config.raw["dynamic_batching"]
    assert (batching["priority_levels"], batching["default_priority_level"]) == (3, 2)
    assert batching["default_queue_policy"] == {
        "timeout_action": "DELAY",
        "default_timeout_microseconds": 5000,
        "allow_timeout_override": True,
        "max_queue_size": 4,
    }
    # map keys stay strings (JSON's), every field of a value printed, 64-bit integers as numbers
    assert batching["priority_queue_policy"] == {
        "1": {
            "timeout_action": "REJECT",
            "default_timeout_microseconds": 0,
            "allow_timeout_override": False,
            "max_queue_size": 2,
        },
        "3": {
            "timeout_action": "REJECT",
            "default_timeout_microseconds": 2**64 - 1,
            "allow_timeout_override": False,
            "max_queue_size": 0,
        },
    }
    assert json.loads(json.dumps(config.raw)) == config.raw


def test_the_json_form_a_load_sends_parses_to_the_same_config():
    text = parse_config(FULL)
    sent = json.dumps(text.raw)  # what tritonclient's load_model(config=...) would carry
    assert parse_config_json(sent).raw == text.raw
    loose = parse_config_json(
        '{"max_batch_size": 2, "dynamic_batching": {"priority_levels": "2", "default_priority_level": 1, '
        '"priority_queue_policy": {"2": {"timeout_action": "DELAY", "default_timeout_microseconds": "7"}}}}'
    )
    policy = loose.raw["dynamic_batching"]["priority_queue_policy"]["2"]
    assert (policy["timeout_action"], policy["default_timeout_microseconds"]) == ("DELAY", 7)


def test_the_stored_form_reads_back_as_the_levels_it_says():
    raw = parse_config(FULL).raw
    assert config_from_raw(raw).raw == raw
    levels = PriorityLevels.from_config(raw["dynamic_batching"])
    assert levels == PriorityLevels(
        3,
        2,
        QueuePolicy(delay=True, timeout_us=5000, allow_override=True, max_size=4),
        ((1, QueuePolicy(max_size=2)), (3, QueuePolicy(timeout_us=2**64 - 1))),
    )
    assert [levels.level(p) for p in (0, 1, 2, 3, 4, 2**64 - 1)] == [2, 1, 2, 3, 2, 2]  # out of range: default
    assert [levels.policy(n).max_size for n in (1, 2, 3)] == [2, 4, 0]  # level 2 has no policy: the default's
    assert [levels.queue_timeout(p) for p in (0, 1, 3)] == [True, False, False]


@pytest.mark.parametrize(
    "requested,expected",
    [(0, 5000), (1000, 1000), (4999, 4999), (5000, 5000), (9000, 5000)],  # only ever shorter
)
def test_a_request_timeout_only_shortens_the_default_where_allowed(requested, expected):
    assert QueuePolicy(timeout_us=5000, allow_override=True).timeout_us_for(requested) == expected
    assert QueuePolicy(timeout_us=5000).timeout_us_for(requested) == 5000  # no override
    assert QueuePolicy(allow_override=True).timeout_us_for(requested) == 0  # no default: no queue timeout (Triton)


@pytest.mark.parametrize(
    "batching,needle",
    [
        ("priority_levels: 2", "default priority level must be in range [1, 2]"),
        ("priority_levels: 2 default_priority_level: 3", "default priority level must be in range [1, 2]"),
        (
            "priority_levels: 2 default_priority_level: 1 priority_queue_policy { key: 3 value: { } }",
            "priority queue policy must have priority level in range [1, 2]",
        ),
        (
            "priority_levels: 2 default_priority_level: 1 priority_queue_policy { key: 0 value: { } }",
            "priority queue policy must have priority level in range [1, 2]",
        ),
        (
            "priority_levels: 2 default_priority_level: 1 preserve_ordering: true",
            "Only one priority level is allowed when 'preserve_ordering' is true",
        ),
        (
            "preserve_ordering: true default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 10 }",
            "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true",
        ),
        (
            "preserve_ordering: true priority_levels: 1 default_priority_level: 1 "
            "priority_queue_policy { key: 1 value: { timeout_action: DELAY default_timeout_microseconds: 10 } }",
            "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true",
        ),
        ("default_priority_level: 1", "default_priority_level needs priority_levels"),
        (
            "priority_queue_policy { key: 1 value: { max_queue_size: 1 } }",
            "priority_queue_policy needs priority_levels",
        ),
        (
            "default_queue_policy { timeout_action: LATER }",
            "ModelQueuePolicy.TimeoutAction has no value 'LATER' (one of REJECT, DELAY)",
        ),
        ("default_queue_policy { max_queue_size: -1 }", "max_queue_size"),
        ("default_queue_policy { max_timeout: 1 }", "ModelQueuePolicy has no field 'max_timeout'"),
    ],
)
def test_levels_and_policies_triton_refuses_are_refused(batching, needle):
    with pytest.raises(ConfigError) as info:
        parse_config(f"max_batch_size: 4\ndynamic_batching {{ {batching} }}")
    assert str(info.value).startswith("config.pbtxt") and needle in str(info.value), str(info.value)


def test_json_form_is_checked_alike():
    with pytest.raises(ConfigError, match=r"default priority level must be in range \[1, 4\]"):
        parse_config_json('{"max_batch_size": 2, "dynamic_batching": {"priority_levels": 4}}')
    with pytest.raises(ConfigError, match="timeout_action"):
        parse_config_json('{"dynamic_batching": {"default_queue_policy": {"timeout_action": "SOMETIMES"}}}')


def test_without_a_batch_dimension_the_queue_is_still_configured():
    """Triton's dynamic batcher queues requests of a model with max_batch_size 0 too (one per batch)."""
    config = parse_config(
        "dynamic_batching { priority_levels: 2 default_priority_level: 2 default_queue_policy { max_queue_size: 1 } }"
    )
    assert config.max_batch_size == 0 and config.raw["dynamic_batching"]["priority_levels"] == 2
