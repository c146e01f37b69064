"""The traffic split in the registry snapshot (pure: records in, entries
out): weights drawn per unversioned request, named versions never split, the
split's versions serving whatever the policy says, dead entries skipped."""

from __future__ import annotations

import random
from collections import Counter

from inference.ports import ModelRecord, VersionRecord
from inference.serving.snapshot import build_snapshot

SIGNATURE = [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]


def record(traffic: dict, labels: dict, states=("READY", "READY", "READY"), policy: str = "latest") -> ModelRecord:
    versions = tuple(
        VersionRecord(n, state, "", f"sha{n}", f"m/{n}", 10, SIGNATURE, SIGNATURE) for n, state in enumerate(states, 1)
    )
    return ModelRecord(
        "m", "onnxruntime_onnx", 0, policy, 1, (), True, labels=labels, versions=versions, traffic=traffic
    )


def test_unversioned_requests_are_drawn_by_weight():
    entry = build_snapshot([record({"stable": 90, "canary": 10}, {"stable": 1, "canary": 3})])["m"]
    assert entry.served == (3, 1)  # version 1 serves for the split although the policy is latest 1
    assert entry.default.number == 1  # the heaviest route: metadata and readiness show it
    random.seed(5)
    counts = Counter(entry.route().number for _ in range(20000))
    assert set(counts) == {1, 3} and abs(counts[3] / 20000 - 0.10) < 0.01


def test_without_a_split_the_default_version_answers():
    entry = build_snapshot([record({}, {"stable": 1})])["m"]
    assert entry.split == () and entry.route().number == 3 == entry.default.number and entry.served == (3,)


def test_dead_entries_are_skipped():
    # canary's label is gone (its version was deleted), nightly has weight 0: all to stable.
    entry = build_snapshot([record({"stable": 60, "canary": 30, "nightly": 10}, {"stable": 2, "nightly": 3})])["m"]
    assert {entry.route().number for _ in range(200)} == {2, 3}
    entry = build_snapshot(
        [record({"stable": 60, "canary": 40}, {"stable": 2, "canary": 3}, ("READY", "READY", "FAILED"))]
    )["m"]
    assert {entry.route().number for _ in range(200)} == {2} and entry.served == (2,)


def test_an_unloaded_model_serves_nothing_even_with_a_split():
    rec = record({"stable": 100}, {"stable": 1})
    rec = ModelRecord(**{**rec.__dict__, "loaded": False})
    entry = build_snapshot([rec])["m"]
    assert entry.served == () and entry.route() is None


def test_a_split_sends_each_sequence_to_one_version():
    """Requests of a sequence (sequence batching) draw by a hash of their
    caller and ID: the same version for all of a sequence, the weights over
    sequences."""
    from inference.runtime.sequences.policy import split_draw

    entry = build_snapshot([record({"stable": 70, "canary": 30}, {"stable": 1, "canary": 3})])["m"]
    versions = {}
    for corrid in range(1, 2001):  # 0 is no sequence
        picks = {
            entry.route(split_draw({"sequence_id": corrid, "sequence_start": i == 0}, "team:a")).number
            for i in range(3)
        }
        assert len(picks) == 1
        versions[corrid] = picks.pop()
    assert abs(Counter(versions.values())[3] / 2000 - 0.30) < 0.04
