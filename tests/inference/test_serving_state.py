"""The serving state (inference/serving/state.py): one computation of which
versions serve and which is the default, read by the registry, the
management API and the web UI."""

import pytest

from inference.ports import ModelRecord, VersionRecord
from inference.serving.state import UNLOADED, served_versions, serving_state, traffic_routes


@pytest.mark.parametrize(
    "policy,ready,latest,specific,expected",
    [
        ("latest", [1, 2, 3], 1, (), [3]),
        ("latest", [3, 1, 2], 2, (), [3, 2]),
        ("latest", [1], 5, (), [1]),
        ("all", [2, 1, 7], 1, (), [7, 2, 1]),
        ("specific", [1, 2, 3], 1, (1, 3, 9), [3, 1]),
        ("specific", [1, 2], 1, (5,), []),
        ("latest", [], 1, (), []),
    ],
)
def test_served_versions(policy, ready, latest, specific, expected):
    assert served_versions(policy, ready, latest, specific) == expected


def test_bad_policies():
    with pytest.raises(ValueError):
        served_versions("newest", [1])
    with pytest.raises(ValueError):
        served_versions("latest", [1], latest=0)


def _record(states, policy="latest", latest=1, specific=(), labels=None, traffic=None, loaded=True, sequence=None):
    versions = tuple(VersionRecord(n, state, "", f"sha{n}", f"m/{n}", 1) for n, state in enumerate(states, 1))
    return ModelRecord(
        "m", "onnxruntime_onnx", 0, policy, latest, tuple(specific), loaded,
        labels=labels or {}, traffic=traffic or {}, versions=versions, sequence_batching=sequence,
    )  # fmt: skip


def test_policy_alone():
    state = serving_state(_record(["READY", "READY", "FAILED"], policy="all"))
    assert (state.served, state.default, state.routes) == ((2, 1), 2, ())
    assert state.reason(3, "FAILED", "bad graph") == "bad graph" and state.reason(2, "READY") == ""


def test_the_split_keeps_its_versions_serving_and_its_heaviest_route_is_the_default():
    record = _record(["READY"] * 3, labels={"stable": 1, "canary": 3}, traffic={"stable": 80, "canary": 20})
    state = serving_state(record)
    assert state.served == (3, 1) and state.default == 1
    assert state.routes == (("canary", 3, 20), ("stable", 1, 80))
    assert "not served by the model's version policy (latest)" in state.reason(2, "READY")
    tie = serving_state(_record(["READY"] * 2, labels={"a": 1, "b": 2}, traffic={"a": 50, "b": 50}))
    assert tie.default == 1  # the first route by label on a tie


def test_an_unloaded_model_serves_nothing():
    record = _record(["READY"] * 2, labels={"stable": 1}, traffic={"stable": 100}, loaded=False)
    state = serving_state(record)
    assert (state.served, state.default, state.routes, state.loaded) == ((), None, (), False)
    assert state.reason(1, "READY") == UNLOADED


def test_a_refused_sequence_configuration_serves_nothing():
    state = serving_state(_record(["READY"], sequence={"iterative_sequence": True}))
    assert state.served == () and state.default is None and state.refused.startswith("sequence_batching: ")
    assert state.reason(1, "READY") == state.refused


def test_routes():
    assert traffic_routes({"a": 50, "b": 50, "c": 0}, {"a": 1, "b": 2, "c": 3}, [1, 3]) == [("a", 1, 50)]
