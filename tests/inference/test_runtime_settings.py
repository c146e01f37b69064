"""The trace and log settings as stored for the processes of a machine
(inference/runtime_settings.py RuntimeSettings; issue 22 F15): the stored file is
capped at MAX_SETTINGS_BYTES, and a file written by an earlier version (a
100,000-level list, a 4,001-digit rate: 1.4 MB) is never taken as it is.
Two RuntimeSettings on one directory stand for two server processes."""

from __future__ import annotations

import json
import time

import pytest

from inference import runtime_settings
from inference.protocol.errors import InvalidInput
from inference.serving.changes import ChangeBeacon

#: A model's own settings at their largest: every key, the longest values, a 128-character name.
LARGEST_OWN = {"trace_level": ["TIMESTAMPS", "TENSORS"], "trace_rate": "2147483647", "trace_count": "2147483647",
               "log_frequency": "2147483647", "trace_file": "", "trace_mode": "opentelemetry"}  # fmt: skip


def test_the_stored_settings_are_capped(tmp_path):
    writer, reader = runtime_settings.RuntimeSettings(tmp_path), runtime_settings.RuntimeSettings(tmp_path)
    path = tmp_path / "runtime-settings.json"
    accepted = 0
    with pytest.raises(InvalidInput, match="over the limit") as info:
        for i in range(10_000):
            writer.update_trace(LARGEST_OWN, model=f"{i:05d}".ljust(128, "m"))
            accepted += 1
    entry = len(json.dumps({"0" * 128: LARGEST_OWN}, sort_keys=True))  # one model's share of the file
    assert accepted == pytest.approx(runtime_settings.MAX_SETTINGS_BYTES / entry, abs=2)  # ~200 models at their largest
    assert path.stat().st_size <= runtime_settings.MAX_SETTINGS_BYTES
    refused = f"{accepted:05d}".ljust(128, "m")
    assert writer.trace(refused)["trace_rate"] == "1000" and "limit of 65536" in str(info.value)
    # The other process sees every accepted model's settings, not the refused one's.
    reader.follow()
    assert reader.trace(f"{accepted - 1:05d}".ljust(128, "m")) == LARGEST_OWN
    assert reader.trace(refused) == runtime_settings.TRACE_DEFAULTS
    # Clearing a model's own settings makes room again.
    writer.update_trace(dict.fromkeys(LARGEST_OWN), model="00000".ljust(128, "m"))
    assert writer.update_trace(LARGEST_OWN, model=refused) == LARGEST_OWN


def _store(directory, state) -> None:
    """Write the settings file as another (earlier) version did, and signal the change."""
    (directory / "runtime-settings.json").write_text(json.dumps(state))
    ChangeBeacon(directory / "runtime-settings.changes").bump()


def test_an_oversized_or_unbounded_stored_file_is_not_taken(tmp_path):
    settings = runtime_settings.RuntimeSettings(tmp_path)
    settings.update_trace({"trace_rate": "7"})
    # 1.4 MB, as the attack left it: not read (over the cap); the settings in force stay.
    _store(tmp_path, {"trace": {"trace_level": ["TIMESTAMPS"] * 100_000, "trace_rate": "1" * 4001}})
    assert (tmp_path / "runtime-settings.json").stat().st_size > runtime_settings.MAX_SETTINGS_BYTES
    settings.follow()
    assert settings.trace()["trace_rate"] == "7"
    # Small but unbounded values: that section is dropped, the valid ones kept.
    _store(tmp_path, {"trace": {"trace_rate": "1" * 4001}, "models": {"m": {"trace_level": ["OFF", "OFF"]},
           "n": {"trace_count": "5"}}, "log": {"log_verbose_level": 2**40}})  # fmt: skip
    settings.follow()
    assert settings.trace() == runtime_settings.TRACE_DEFAULTS
    assert settings.trace("m")["trace_level"] == ["OFF"] and settings.trace("n")["trace_count"] == "5"
    assert settings.log() == runtime_settings.LOG_DEFAULTS
    # Sampling reads the bounded rate: no 4,001-digit parse per inference (114 us each before).
    started = time.perf_counter()
    for _ in range(10_000):
        settings.sample("n", client_sampled=False)
    assert (time.perf_counter() - started) / 10_000 < 50e-6
    # The next write starts from what was read, not from the unbounded file.
    settings.update_trace({"trace_count": "3"})
    assert json.loads((tmp_path / "runtime-settings.json").read_text()) == {
        "trace": {"trace_count": "3"}, "models": {"m": {"trace_level": ["OFF"]}, "n": {"trace_count": "5"}}, "log": {}
    }  # fmt: skip


@pytest.mark.parametrize(
    ("update", "clean"),
    [
        ({"trace_level": ["TENSORS", "TIMESTAMPS", "TENSORS"]}, {"trace_level": ["TIMESTAMPS", "TENSORS"]}),
        ({"trace_level": "OFF"}, {"trace_level": ["OFF"]}),
        ({"trace_rate": 5, "trace_count": -1}, {"trace_rate": "5", "trace_count": "-1"}),
        ({"log_frequency": 0}, {"log_frequency": "0"}),
        ({"trace_rate": 5.0, "trace_count": "+7"}, {"trace_rate": "5", "trace_count": "7"}),
    ],
)
def test_valid_updates_are_cleaned_to_triton_forms(update, clean):
    assert runtime_settings.clean_trace_settings(update, per_model=False) == clean


@pytest.mark.parametrize(
    "update",
    [
        {"trace_level": []},
        {"trace_level": ["OFF", "OFF", "OFF", "OFF"]},
        {"trace_level": [["TIMESTAMPS"]]},
        {"trace_rate": "0"},
        {"trace_rate": 5.5},
        {"trace_rate": float("inf")},
        {"trace_rate": True},
        {"trace_rate": "1_000"},
        {"trace_rate": " 5"},
        {"trace_rate": "12345678901"},  # 11 digits: refused before parsing
        {"trace_count": str(2**31)},
        {"log_frequency": -1},
    ],
)
def test_out_of_range_updates_are_refused(update):
    with pytest.raises(InvalidInput) as info:
        runtime_settings.clean_trace_settings(update, per_model=False)
    assert len(str(info.value)) < 200
