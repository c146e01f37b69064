"""inference/codecs/deep_json.py: JSON of any depth, as the standard library reads it."""

from __future__ import annotations

import json

import pytest

from inference.codecs import deep_json
from inference.codecs.message import load_json
from inference.protocol.errors import InvalidInput

DOCUMENTS = [
    '{"a": [1, 2.5, -3e2, {"b": null}], "c": "x\\u00e9\\n", "d": true, "e": false}',
    "[]",
    "{}",
    "[[], {}, [[]]]",
    " 1.5e3 ",
    '"text"',
    "0",
    '{"k": {"k": {"k": [0, -0.0]}}}',
]


@pytest.mark.parametrize("text", DOCUMENTS)
def test_the_same_values_as_the_standard_library(text):
    assert deep_json.loads(text) == json.loads(text)


@pytest.mark.parametrize("text", ["[1,]", '{"a" 1}', "[1] x", "[", '{"a": }', "nul", "{1: 2}", '"open', ""])
def test_malformed_json_is_refused(text):
    with pytest.raises(deep_json.DeepJSONError):
        deep_json.loads(text)


def test_any_depth_without_recursion():
    depth = 250_000
    value = deep_json.loads('{"ready":' + "[" * depth + "true" + "]" * depth + "}")["ready"]
    levels = 0
    while isinstance(value, list):
        value, levels = value[0], levels + 1
    assert (levels, value) == (depth, True)


def test_load_json_falls_back_only_when_asked():
    deep = ("[" * 2000 + "1" + "]" * 2000).encode()
    with pytest.raises(InvalidInput, match="malformed JSON in the request body"):
        load_json(deep)
    assert isinstance(load_json(deep, deep=True), list)
    with pytest.raises(InvalidInput, match="malformed JSON in the request body"):
        load_json(b"[" * 2000, deep=True)
