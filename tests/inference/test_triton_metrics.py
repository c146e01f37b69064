"""Triton's metrics rendered from the statistics' counters (inference/observability/triton_metrics.py),
Triton's CPU metrics from a /proc of known numbers, the failure reasons, and the statistics tables of
the first layout read after the upgrade."""

from __future__ import annotations

import re

import numpy as np
import pytest

from inference.observability import statistics_local as local
from inference.observability.statistics import StatisticsRecorder, failure_reason
from inference.observability.triton_metrics import HostMetrics, TritonMetrics
from inference.protocol.errors import DeadlineExceeded, InferenceError, InvalidInput, ModelNotReady
from tests.support.exposition import samples


def test_the_counters_of_known_requests_render_as_triton_writes_them():
    recorder = StatisticsRecorder()
    durations = []
    for rows, total, queue, compute in ((1, 10_999, 1_500, (700, 5_300, 2_999)), (3, 20_001, 0, (1, 15_000, 4_000))):
        recorder.record_success("m", 1, rows=rows, total_ns=total, queue_ns=queue, input_ns=compute[0],
                                infer_ns=compute[1], output_ns=compute[2], batch_size=rows, executed=True)  # fmt: skip
        durations.append((total, queue, *compute))
    recorder.record_failure("m", 1, 5_000, "REJECTED")
    recorder.record_failure("m", 1, 7_000, "BACKEND")
    recorder.record_failure("m", 1, 9_000)  # OTHER
    recorder.record_cache_hit("c", 2, total_ns=4_000, queue_ns=1_000, lookup_ns=2_500)
    recorder.record_cache_miss("c", 2, 3_700)
    served = [("m", 1, False), ("c", 2, True), ('odd"name', 1, False)]
    text = TritonMetrics(recorder.machine_counters, lambda: served).render()
    got = samples(text)
    sums = np.array(durations).sum(axis=0)
    m = 'model="m",version="1"'
    assert got[f"nv_inference_request_success{{{m}}}"] == 2
    assert got[f"nv_inference_count{{{m}}}"] == 4 and got[f"nv_inference_exec_count{{{m}}}"] == 2
    names = ("request", "queue", "compute_input", "compute_infer", "compute_output")
    for name, ns in zip(names, sums):
        assert got[f"nv_inference_{name}_duration_us{{{m}}}"] == ns // 1000, name
    failures = {r: got[f'nv_inference_request_failure{{model="m",reason="{r}",version="1"}}'] for r in
                ("REJECTED", "CANCELED", "BACKEND", "OTHER")}  # fmt: skip
    assert failures == {"REJECTED": 1, "CANCELED": 0, "BACKEND": 1, "OTHER": 1}
    (stats,) = recorder.read([("m", 1)])
    assert sum(failures.values()) == stats.stages["fail"].count
    c = 'model="c",version="2"'
    assert got[f"nv_inference_request_success{{{c}}}"] == 1 and got[f"nv_inference_count{{{c}}}"] == 0
    assert got[f"nv_cache_num_hits_per_model{{{c}}}"] == 1 and got[f"nv_cache_hit_duration_per_model{{{c}}}"] == 2
    assert got[f"nv_cache_num_misses_per_model{{{c}}}"] == 1 and got[f"nv_cache_miss_duration_per_model{{{c}}}"] == 3
    assert f"nv_cache_num_hits_per_model{{{m}}}" not in got  # the cache's series only where it is on
    assert got['nv_inference_request_success{model="odd\\"name",version="1"}'] == 0  # served, no traffic yet
    assert "# TYPE nv_inference_request_success counter" in text.decode()
    assert not re.search(r"^nv_\w+_total", text.decode(), re.M)  # Triton's counters have no _total


def test_failure_reasons():
    assert failure_reason(DeadlineExceeded("late"), False) == "REJECTED"
    assert failure_reason(DeadlineExceeded("late"), True) == "REJECTED"
    assert failure_reason(InferenceError("ort"), True) == "BACKEND"
    assert failure_reason(ModelNotReady("unloaded"), True) == "OTHER"
    assert failure_reason(InvalidInput("shape"), False) == "OTHER"
    import asyncio

    assert failure_reason(asyncio.CancelledError(), True) == "CANCELED"


def test_cpu_metrics_from_proc(tmp_path):
    def write(user, nice, system, idle, iowait, irq, softirq, steal):
        (tmp_path / "stat").write_text(f"cpu  {user} {nice} {system} {idle} {iowait} {irq} {softirq} {steal} 0 0\n"
                                       "cpu0 1 2 3 4 5 6 7 8 0 0\n")  # fmt: skip
        return user + nice + system + irq + softirq + steal, idle + iowait

    (tmp_path / "meminfo").write_text("MemTotal:       16000 kB\nMemFree:  1000 kB\nMemAvailable:   6000 kB\n")
    host = HostMetrics(str(tmp_path))
    first = write(100, 5, 50, 1000, 20, 3, 2, 0)
    got = samples(host.render())
    assert got == {"nv_cpu_utilization": 0.0, "nv_cpu_memory_total_bytes": 16000 * 1024,
                   "nv_cpu_memory_used_bytes": 10000 * 1024}  # fmt: skip
    second = write(400, 5, 150, 1300, 30, 3, 2, 0)
    busy, idle = second[0] - first[0], second[1] - first[1]
    assert samples(host.render())["nv_cpu_utilization"] == pytest.approx(busy / (busy + idle))
    (tmp_path / "stat").unlink()
    assert host.render() == b""


def test_a_table_of_the_first_layout_is_read_widened(tmp_path):
    """``retired.stats`` left by a release with 16 counters a slot: its counts stay, the new ones are 0."""
    old = np.dtype([("name", "S256"), ("version", "<i8"), ("batch", "<i8"), ("c", "<i8", (16,))])
    slots = np.zeros(2, old)
    slots[0] = (b"m", 1, 0, np.arange(16))
    slots[1] = (b"m", 1, 4, np.arange(16) * 2)
    header = local.HEADER.pack(b"mhstats1", 2, 2, 0, 0).ljust(local.HEADER_BYTES, b"\0")
    (tmp_path / local.RETIRED).write_bytes(header + slots.tobytes())
    totals = local.machine_totals(tmp_path)
    assert totals[("m", 1, 0)].tolist() == list(range(16)) + [0] * (local.WIDTH - 16)
    assert totals[("m", 1, 4)].tolist() == [2 * i for i in range(16)] + [0] * (local.WIDTH - 16)
