"""Soft CPU affinity (hosting/processes/affinity.py, HTTP_CPU_AFFINITY / GRPC_CPU_AFFINITY).

The policy alone (:class:`SoftPin`), then a real ``serve``: idle, each HTTP
worker and gRPC process keeps its threads on a CPU of its own; overlapping
requests let a worker's threads on every CPU; idle again, they return home;
a gRPC process whose CPU is full probes every CPU, and says so in its log."""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from django.core.management import CommandError, call_command

from bench import worker_cost
from hosting.processes.affinity import SoftPin
from tests.support.live import wait_for
from tests.support.onnx_models import slow_loop_expected
from tests.support.server import LiveServer

HANDOFF = 6e-6  # a hand-off between a process's own threads waits a few microseconds per turn


def test_the_policy_pins_a_process_serving_one_request_at_a_time():
    pin = SoftPin()
    assert pin.decide(0.05, 0.05, 0.0, 0.0, 0).action == "pin"
    # One request at a time; its threads hand off to each other: 30% of the time waiting, 6 us per turn.
    for tick in range(2, 40):
        assert pin.decide(tick * 0.05, 0.05, 0.95, 0.015, int(0.015 / HANDOFF)).action is None
    assert pin.pinned


def test_the_policy_widens_while_requests_overlap_and_pins_again_after():
    pin = SoftPin()
    pin.decide(0.05, 0.05, 0.0, 0.0, 0)
    assert pin.decide(0.10, 0.05, 3.2, 0.0, 10).action == "widen"
    assert pin.decide(0.15, 0.05, 3.0, 0.0, 10).action is None  # still overlapping: stays wide
    assert pin.decide(0.20, 0.05, 1.2, 0.0, 10).action is None  # between the thresholds: no flapping
    assert pin.decide(0.25, 0.05, 0.4, 0.0, 10).action == "pin"


def test_another_busy_process_on_the_home_cpu_is_probed_too():
    pin = SoftPin()
    pin.decide(0.0, 0.05, 0.0, 0.0, 0)
    # Idle, while another process holds the home CPU (40% waiting, 2 ms per turn): nothing to gain, no probe.
    for tick in range(1, 10):
        assert pin.decide(tick * 0.05, 0.05, 0.0, 0.02, 10).action is None
    # Serving while it holds it: after 4 such intervals, a probe.
    decisions = [pin.decide(0.5 + tick * 0.05, 0.05, 0.5, 0.02, 10, ran=0.02, served=40) for tick in range(1, 5)]
    assert [d.action for d in decisions] == [None, None, None, "widen"]
    assert decisions[-1].why == "probing: the home CPU is shared (run-queue waits 40%) at 800 req/s"
    # Wide, twice the rate: it stays wide for the hold.
    for tick in range(5, 9):
        decision = pin.decide(0.5 + tick * 0.05, 0.05, 0.5, 0.0, 10, ran=0.04, served=80)
    assert (decision.action, pin.hold) == (None, 1.0)
    assert decision.why == "probe of a shared (run-queue waits 40%) home CPU: 1600 req/s wide, 800 pinned; for 1 s"


def _pinned_and_full(pin: SoftPin, start: float, rate: float) -> float:
    """Feed ``pin`` pinned intervals with its home CPU full (one request in
    flight, 96% of the time running) at ``rate`` requests/s until it
    widens to probe (pinning it first if it is wide); returns the time it
    did."""
    now = start
    while True:
        now += 0.05
        decision = pin.decide(now, 0.05, 1.0, 0.001, 200, ran=0.048, served=round(rate * 0.05))
        if decision.action == "widen":
            return now
        assert decision.action in (None, "pin") and now < start + 60


def _wide(pin: SoftPin, start: float, rate: float, intervals: int):
    now, decision = start, None
    for _ in range(intervals):
        now += 0.05
        decision = pin.decide(now, 0.05, 1.0, 0.0, 0, ran=0.07, served=round(rate * 0.05))
    return now, decision


def test_a_full_home_cpu_is_tested_by_a_probe_that_keeps_the_faster_placement():
    pin = SoftPin(min_hold=1.0, max_hold=4.0)
    pin.decide(0.0, 0.05, 0.0, 0.0, 0)
    # Pinned and 80% running: not full, no probe.
    for tick in range(1, 10):
        assert pin.decide(tick * 0.05, 0.05, 1.0, 0.001, 200, ran=0.04, served=50).action is None
    # Full for 4 intervals (their rate is the pinned one): it widens to probe.
    now = _pinned_and_full(pin, 0.5, rate=1000)
    assert now == pytest.approx(0.70) and pin.probing
    # Wide, 1,400 requests/s (a channel's calls in parallel): it stays wide for the probe hold (1 s).
    now, decision = _wide(pin, now, 1400, 4)
    assert (decision.action, pin.hold, pin.pinned, pin.probing) == (None, 1.0, False, False)
    assert pin.decide(now + 0.5, 0.05, 1.0, 0.0, 0).action is None  # held
    assert pin.decide(now + 1.05, 0.05, 1.0, 0.0, 0).action == "pin"  # the hold is over
    # Full again; wide wins again: the hold doubles.
    now, decision = _wide(pin, _pinned_and_full(pin, now + 1.05, rate=1000), 1400, 4)
    assert (decision.action, pin.hold) == (None, 2.0)
    # Then wide serves no more (one request at a time): pinned again, and no probe within the probe hold (1 s).
    now = _pinned_and_full(pin, pin.wide_until, rate=1000)
    now, decision = _wide(pin, now, 1020, 4)
    assert decision.action == "pin" and pin.next_probe == pytest.approx(now + 1.0)
    assert _pinned_and_full(pin, now, rate=1000) >= now + 1.0
    # Pinned wins again: the next probe waits twice as long.
    now, decision = _wide(pin, pin.next_probe + 0.05, 900, 4)
    assert decision.action == "pin" and pin.next_probe == pytest.approx(now + 2.0)


def test_short_waits_of_many_turns_do_not_widen():
    pin = SoftPin()
    pin.decide(0.0, 0.05, 0.0, 0.0, 0)
    assert pin.decide(0.05, 0.05, 1.0, 0.04, 4000).action is None  # 80% waiting, 10 us per turn


def _cpus(pid: int) -> set[str]:
    """The CPU lists the threads of ``pid`` may run on."""
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("Cpus_allowed_list:"):
                    found.add(line.split()[1])
        except OSError:
            continue
    return found


def _http_workers(server) -> list[int]:
    """granian's worker processes (children of its main process)."""
    pids = worker_cost.role_pids({server.process.pid}, "HTTP")
    return [pid for pid in pids if int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) in pids]


def _grpc_serving(server) -> list[int]:
    pids = worker_cost.role_pids({server.process.pid}, "gRPC")
    return [pid for pid in pids if b"--processes\x001\x00" in Path(f"/proc/{pid}/cmdline").read_bytes()]


pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or len(os.sched_getaffinity(0)) < 2, reason="reads /proc; needs 2 CPUs"
)


@pytest.fixture(scope="module")
def server(test_repository, tmp_path_factory):
    live = LiveServer(test_repository, tmp_path_factory.mktemp("affinity-live"))
    yield live.start()
    live.stop()


def _home(pid: int) -> str | None:
    """The one CPU every thread of ``pid`` may run on, or None."""
    found = _cpus(pid)
    return next(iter(found)) if len(found) == 1 and next(iter(found)).isdigit() else None


def test_idle_http_workers_keep_their_threads_on_cpus_of_their_own(server):
    def homes():
        return [_home(pid) for pid in _http_workers(server)]

    assert wait_for(lambda: len(homes()) == 2 and None not in homes() and len(set(homes())) == 2, timeout=60), homes()
    # The gRPC processes too (GRPC_CPU_AFFINITY=soft), while serve itself is left where it was.
    assert wait_for(lambda: len({_home(pid) for pid in _grpc_serving(server)} - {None}) == 2, timeout=60)
    assert len(_grpc_serving(server)) == 2
    assert _home(server.process.pid) is None, _cpus(server.process.pid)


def test_a_process_that_imports_the_wsgi_module_keeps_its_placement(monkeypatch):
    """Only granian's workers are placed: this test process imported
    hosting.wsgi (the server tests do) and may still run on every CPU."""
    monkeypatch.setenv("MODELHOST_WARM_START", "0")  # no registry load (no database here)
    import hosting.wsgi  # noqa: F401

    time.sleep(0.3)  # a monitor would have placed it by now (it looks every 50 ms)
    # The main thread (ONNX Runtime may place its own pool threads) and no monitor thread.
    main = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/status").read_text()
    assert f"Cpus_allowed_list:\t{next(iter(_cpus(os.getppid())))}\n" in main
    assert not [thread.name for thread in threading.enumerate() if thread.name.startswith("affinity-")]


def test_overlapping_requests_let_a_worker_use_every_cpu_then_it_returns_home(server):
    def pinned_count() -> int:
        return sum(_home(pid) is not None for pid in _http_workers(server))

    assert wait_for(lambda: pinned_count() == 2, timeout=60)
    x = np.full((1, 256), 0.5, dtype=np.float32)
    expected = slow_loop_expected(x, 2000)
    stop, answers, errors = threading.Event(), [], []

    def caller():
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
        inputs = [httpclient.InferInput("x", [1, 256], "FP32"), httpclient.InferInput("n", [], "INT64")]
        inputs[0].set_data_from_numpy(x)
        inputs[1].set_data_from_numpy(np.array(2000, dtype=np.int64))
        while not stop.is_set():
            try:
                answers.append(client.infer("slow", inputs).as_numpy("y"))
            except Exception as exc:  # reported below
                errors.append(exc)
                return

    callers = [threading.Thread(target=caller) for _ in range(8)]
    for thread in callers:
        thread.start()
    try:
        widened = wait_for(lambda: pinned_count() < 2, timeout=30)
    finally:
        stop.set()
        for thread in callers:
            thread.join(timeout=120)
    assert not errors, errors
    assert widened
    assert answers and all(np.allclose(a, expected, atol=1e-5) for a in answers)
    assert wait_for(lambda: pinned_count() == 2, timeout=60)  # idle again: home


def test_a_grpc_process_whose_cpu_is_cramped_probes_every_cpu_and_logs_its_finding(server):
    """One gRPC client calling ``slow`` back to back keeps its process's
    home CPU full (or, on a busy machine, shared with another process): the
    process widens for a probe, logs the rates it compared, and is home
    again once idle."""
    x = np.full((1, 256), 0.5, dtype=np.float32)
    expected = slow_loop_expected(x, 3000)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    inputs = [grpcclient.InferInput("x", [1, 256], "FP32"), grpcclient.InferInput("n", [], "INT64")]
    inputs[0].set_data_from_numpy(x)
    inputs[1].set_data_from_numpy(np.array(3000, dtype=np.int64))
    found = re.compile(
        r"hosting\.processes\.affinity grpc (\d+): (pin|stays wide) \(probe of a (full|shared \(run-queue waits \d+%\)) "
        r"home CPU: (\d+) req/s wide, (\d+) pinned; for \d+ s\)"
    )
    before = len(found.findall(server.log()))
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and len(found.findall(server.log())) == before:
        np.testing.assert_allclose(client.infer("slow", inputs).as_numpy("y"), expected, atol=1e-5)
    client.close()
    outcomes = found.findall(server.log())[before:]
    assert outcomes, server.log()[-3000:]
    pid, placement, _, wide, pinned = outcomes[0]
    assert int(pid) in _grpc_serving(server)
    assert int(pinned) > 0 and (placement == "stays wide") == (int(wide) > 1.05 * int(pinned))
    assert wait_for(lambda: _home(int(pid)) is not None, timeout=60)  # idle again: home


def test_serve_refuses_an_unknown_affinity(settings):
    settings.HTTP_CPU_AFFINITY = "hard"
    with pytest.raises(CommandError, match="HTTP_CPU_AFFINITY must be soft or off, not 'hard'"):
        call_command("serve")


def test_rungrpc_refuses_an_unknown_affinity(settings):
    settings.GRPC_CPU_AFFINITY = "hard"
    with pytest.raises(CommandError, match="GRPC_CPU_AFFINITY must be soft or off, not 'hard'"):
        call_command("rungrpc", "--processes", "1")
