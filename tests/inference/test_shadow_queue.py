"""The shadow queue of a server process (inference/shadow/traffic.py): a
full queue drops a copy at once and counts it, never blocking the caller; a
copy whose versions are busy is not run (counted ``busy``); a copy that
runs counts in the shadow version's statistics and compares with the live
outputs. The executor here is a stand-in whose runs wait for the test (the
ONNX Runtime paths are the data plane's tests and the live ones)."""

from __future__ import annotations

import itertools
import threading
import time

import numpy as np

from inference.admission.fair_share import FairShare
from inference.observability.statistics import StatisticsRecorder
from inference.ports import ModelRecord, VersionRecord
from inference.protocol.types import InferenceRequest, RequestInput
from inference.runtime.execution import RunResult
from inference.serving.snapshot import build_snapshot
from inference.shadow.rollups import ShadowRollups
from inference.shadow.traffic import YIELD_MAX_SECONDS, ShadowSettings, ShadowTraffic
from inference.shared_memory.regions import RegionRegistry

SIGNATURE = [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
OUT = [{"name": "y", "datatype": "FP32", "shape": [-1, 4]}]


class HeldExecutor:
    """Runs y = 2x once the test lets it (``release``); counts its runs."""

    remote = False

    def __init__(self):
        self.release = threading.Event()
        self.started = threading.Event()
        self.runs = 0

    def run(self, target, feeds, output_names, rows=1, deadline=None, placement=(), sequence=None, schedule=None):
        self.started.set()
        assert self.release.wait(10)
        self.runs += 1
        return RunResult([feeds["x"] * 2], rows, True, 0, 0)


def _entries():
    versions = tuple(VersionRecord(n, "READY", "", f"sha{n}", f"m/{n}", 10, SIGNATURE, OUT) for n in (1, 2))
    record = ModelRecord(
        "m", "onnxruntime_onnx", 0, "specific", 1, (1,), True, versions=versions, shadow_version=2,
        shadow_percent=100.0,
    )  # fmt: skip
    model = build_snapshot([record])["m"]
    return model.versions[1], model.versions[2]


def _traffic(capacity: int):
    executor = HeldExecutor()
    fair = FairShare(queue_per_flow=8, seats=lambda target, placement=(): 1)
    statistics = StatisticsRecorder(flush_seconds=0)
    settings = ShadowSettings(capacity=capacity, threads=1)
    return ShadowTraffic(settings, executor, fair, statistics, RegionRegistry()), executor, fair, statistics


def _request(x: np.ndarray) -> InferenceRequest:
    return InferenceRequest("m", [RequestInput("x", "FP32", x.shape, x)])


def _cell(rollups: ShadowRollups):
    (cell,) = rollups.cells.values()
    return cell


def test_the_snapshot_carries_the_shadow_to_the_live_versions():
    live, shadow = _entries()
    assert live.shadow == (1.0, shadow) and shadow.shadow is None and shadow.serving  # it serves, never the default


def test_a_full_queue_drops_and_counts_without_blocking():
    live, shadow = _entries()
    traffic, executor, _fair, statistics = _traffic(capacity=3)
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    live_y = [x * 2]
    assert traffic.offer(live, shadow, _request(x), ["y"], live_y)  # the thread takes it and waits in its run
    assert executor.started.wait(5)
    accepted = [traffic.offer(live, shadow, _request(x), ["y"], live_y) for _ in range(3)]
    started = time.perf_counter()
    refused = [traffic.offer(live, shadow, _request(x), ["y"], live_y) for _ in range(5)]
    took = time.perf_counter() - started
    assert accepted == [True] * 3 and refused == [False] * 5
    assert took < 0.05, took  # five refusals: no wait for the blocked thread
    cell = _cell(traffic.rollups)
    assert (cell.dropped, cell.requests, cell.busy) == (5, 0, 0)
    executor.release.set()
    assert traffic.drain(10)
    cell = _cell(traffic.rollups)
    assert (cell.requests, cell.errors, cell.dropped, executor.runs) == (4, 0, 5, 4)
    assert cell.outputs["y"].compared == 4 and cell.outputs["y"].exact == 4  # 2x both ways
    (stats,) = statistics.read([("m", 2)])
    assert stats.stages["success"].count == 4  # the shadow version's own statistics


def test_busy_versions_are_not_run():
    live, shadow = _entries()
    traffic, executor, fair, _statistics = _traffic(capacity=8)
    executor.release.set()
    x = np.ones((2, 4), np.float32)
    gate = fair.gate(shadow.target)
    assert gate.try_enter()  # a request of the shadow version holds its one seat
    traffic.offer(live, shadow, _request(x), ["y"], [x])
    assert traffic.drain(5) and executor.runs == 0 and _cell(traffic.rollups).busy == 1
    gate.leave()
    live_gate = fair.gate(live.target)
    assert live_gate.try_enter()
    waiting = threading.Thread(target=live_gate.enter, args=("team:a", time.monotonic() + 5))
    waiting.start()  # a request waits for the live version's seat: the server is busy
    while not live_gate.waiting:
        time.sleep(0.001)
    traffic.offer(live, shadow, _request(x), ["y"], [x])
    assert traffic.drain(5) and executor.runs == 0 and _cell(traffic.rollups).busy == 2
    live_gate.leave()
    waiting.join(5)
    live_gate.leave()
    traffic.offer(live, shadow, _request(x), ["y"], [x * 3])  # free now: runs, and differs by x
    assert traffic.drain(5) and executor.runs == 1
    y = _cell(traffic.rollups).outputs["y"]
    assert (y.compared, y.exact, y.max_abs, y.abs_sum, y.elements) == (1, 0, 1.0, 8.0, 8)


def test_a_refused_copy_is_a_shadow_error():
    live, shadow = _entries()
    traffic, executor, _fair, statistics = _traffic(capacity=8)
    executor.release.set()
    wrong = np.ones((1, 5), np.float32)  # the shadow's signature wants [-1, 4]
    traffic.offer(live, shadow, _request(wrong), ["y"], [wrong])
    assert traffic.drain(5) and executor.runs == 0
    cell = _cell(traffic.rollups)
    assert (cell.requests, cell.errors, cell.outputs) == (1, 1, {})
    (stats,) = statistics.read([("m", 2)])
    assert stats.stages["fail"].count == 1


def test_a_copy_runs_in_a_quiet_spell_and_is_busy_without_one():
    """A copy starts once no live request began for ``quiet_seconds``; while live requests keep beginning
    it waits, and after YIELD_MAX_SECONDS it is not run but counted busy."""
    live, shadow = _entries()
    executor = HeldExecutor()
    executor.release.set()
    ticks, busy = itertools.count(), [True]
    fair = FairShare(queue_per_flow=8, seats=lambda target, placement=(): 1)
    traffic = ShadowTraffic(
        ShadowSettings(capacity=8, threads=1, quiet_seconds=0.002),
        executor,
        fair,
        StatisticsRecorder(flush_seconds=0),
        RegionRegistry(),
        live=lambda: False,
        began=lambda: next(ticks) if busy[0] else 0,
    )  # fmt: skip  (busy: a live request began between any two looks)
    x = np.ones((1, 4), np.float32)
    started = time.monotonic()
    traffic.offer(live, shadow, _request(x), ["y"], [x * 2])
    assert traffic.drain(5)
    assert time.monotonic() - started >= YIELD_MAX_SECONDS
    cell = _cell(traffic.rollups)
    assert (executor.runs, cell.busy, cell.requests) == (0, 1, 0)
    busy[0] = False
    traffic.offer(live, shadow, _request(x), ["y"], [x * 2])  # quiet now: it runs
    assert traffic.drain(5) and executor.runs == 1
    assert (cell.busy, cell.requests, cell.outputs["y"].exact) == (1, 1, 1)
