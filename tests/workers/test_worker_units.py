"""Worker pieces without processes: the wire format, the LRU session budget,
execution providers per device, placement."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from kombu.exceptions import ContentDisallowed
from kombu.serialization import dumps as kombu_dumps
from kombu.serialization import loads as kombu_loads

from inference.runtime import wire
from inference.runtime.placement import DeviceError, allowed_queues, parse_device, queue_for
from inference.runtime.worker import DeviceUnavailable, LRUSessions, providers_for
from tests.support.onnx_models import ALL_DATATYPES, expected_identity_input

NUMERIC = [d for d in ALL_DATATYPES if d != "BYTES"]


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_wire_round_trip_numeric(data):
    name = data.draw(st.sampled_from(NUMERIC))
    from inference.protocol.datatypes import BY_NAME

    dtype = BY_NAME[name].numpy
    array = data.draw(hnp.arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)))
    payload = {"inputs": {"x": array}, "outputs": ["y"], "deadline": 1.5, "version": 3}
    got = wire.loads(wire.dumps(payload))
    assert got["outputs"] == ["y"] and got["deadline"] == 1.5 and got["version"] == 3
    out = got["inputs"]["x"]
    assert out.dtype == dtype and out.shape == array.shape
    assert out.tobytes() == array.tobytes()  # bit for bit (NaN payloads included)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(max_size=20), max_size=12))
def test_wire_round_trip_bytes(items):
    array = np.empty(len(items), dtype=object)
    array[:] = items
    got = wire.loads(wire.dumps({"t": array.reshape(len(items), 1) if items else array}))["t"]
    assert [bytes(x) for x in got.reshape(-1)] == items


def test_wire_layout_is_raw_little_endian_and_refuses_objects():
    x = np.array([[1.0, 2.0]], dtype=">f4")  # big-endian in, little-endian on the wire
    message = wire.dumps(x)
    assert np.array([1.0, 2.0], dtype="<f4").tobytes() in message
    assert wire.loads(message).dtype == np.dtype("<f4")
    with pytest.raises(TypeError, match="cannot send"):
        wire.dumps({"bad": object()})
    # kombu uses the registered serializer; pickle never appears.
    content_type, encoding, body = kombu_dumps({"a": np.arange(3)}, serializer="modelhost")
    assert content_type == wire.CONTENT_TYPE and encoding == "binary"
    assert kombu_loads(body, content_type, encoding, accept=[wire.CONTENT_TYPE])["a"].tolist() == [0, 1, 2]
    with pytest.raises(ContentDisallowed):
        kombu_loads(pickle.dumps({"a": 1}), "application/x-python-serialize", "binary", accept=[wire.CONTENT_TYPE])


@pytest.mark.parametrize("datatype", ALL_DATATYPES)
def test_wire_every_datatype(datatype):
    data = expected_identity_input(datatype, (2, 3))
    got = wire.loads(wire.dumps([data]))[0]
    if datatype == "BYTES":
        assert list(got.flat) == list(data.flat)
    else:
        np.testing.assert_array_equal(got, data)
        assert not got.flags.writeable  # a view of the message, not a copy


def test_lru_sessions_respect_the_budget():
    loads = []

    def loader(artifact, sha256):
        loads.append(artifact)
        return f"session:{artifact}"

    cache = LRUSessions(loader, budget=1000, factor=2.0)
    assert cache.get(("a", 1, "s1"), "a", "s1", 200) == "session:a"  # cost 400
    assert cache.get(("b", 1, "s2"), "b", "s2", 200) == "session:b"  # 800 in use
    assert cache.get(("a", 1, "s1"), "a", "s1", 200) == "session:a"  # a is now the most recent
    cache.get(("c", 1, "s3"), "c", "s3", 200)  # 1200 > 1000: evict the least recent (b)
    assert cache.keys() == [("a", 1, "s1"), ("c", 1, "s3")] and cache.used == 800
    cache.get(("huge", 1, "s4"), "huge", "s4", 5000)  # alone over budget: still loads, after evicting all
    assert cache.keys() == [("huge", 1, "s4")]
    cache.retain({("a", 1, "s1")})
    assert cache.keys() == []
    assert loads == ["a", "b", "c", "huge"]


def test_providers_per_device():
    assert providers_for("cpu") == ["CPUExecutionProvider"]
    with pytest.raises(DeviceUnavailable, match="CUDAExecutionProvider"):
        providers_for("cuda:1")  # this machine's onnxruntime has no CUDA provider
    assert providers_for("cuda:1", fallback_to_cpu=True) == ["CPUExecutionProvider"]
    with pytest.raises(DeviceError):
        providers_for("gpu")


def test_devices_queues_and_placement():
    assert parse_device("cuda:2") == ("cuda", 2) and parse_device(" CPU ") == ("cpu", None)
    assert queue_for("cuda:12") == "infer.cuda12" and queue_for("cpu") == "infer.cpu"
    for bad in ("cuda", "cuda:-1", "cuda:x", "tpu:0", ""):
        with pytest.raises(DeviceError):
            parse_device(bad)
    live = {"infer.cpu", "infer.cuda0", "infer.cuda1"}
    assert allowed_queues([], live) == ["infer.cuda0", "infer.cuda1", "infer.cpu"]
    assert allowed_queues([{"kind": "KIND_GPU", "gpus": [1, 3]}], live) == ["infer.cuda1"]
    assert allowed_queues([{"kind": "KIND_GPU", "gpus": []}], live) == ["infer.cuda0", "infer.cuda1"]
    assert allowed_queues([{"kind": "KIND_CPU"}], live) == ["infer.cpu"]
    assert allowed_queues([{"kind": "KIND_GPU", "gpus": [3]}], live) == []
    assert allowed_queues([{"kind": "KIND_CPU"}, {"kind": "KIND_GPU", "gpus": [0]}], live) == [
        "infer.cpu",
        "infer.cuda0",
    ]
