"""Soft CPU affinity (hosting/affinity.py, HTTP_CPU_AFFINITY / GRPC_CPU_AFFINITY).

The policy alone (:class:`SoftPin`), then a real ``serve``: idle, each HTTP
worker keeps its threads on a CPU of its own; overlapping requests let a
worker's threads on every CPU; idle again, they return home. The gRPC
processes are left to the kernel by default."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from django.core.management import CommandError, call_command

from bench import worker_cost
from hosting.affinity import SoftPin
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


def test_the_policy_widens_for_a_hold_when_another_process_holds_the_cpu():
    pin = SoftPin(min_hold=1.0, max_hold=4.0)
    pin.decide(0.0, 0.05, 0.0, 0.0, 0)
    # 40% of the interval waiting, 2 ms per turn: another busy process on the home CPU.
    decision = pin.decide(0.05, 0.05, 0.5, 0.02, 10)
    assert (decision.action, decision.hold) == ("widen", 1.0)
    assert pin.decide(0.5, 0.05, 0.0, 0.0, 0).action is None  # the hold lasts 1 s
    assert pin.decide(1.06, 0.05, 0.0, 0.0, 0).action == "pin"
    # Contention again soon after: the hold doubles, up to max_hold.
    assert pin.decide(1.2, 0.05, 0.5, 0.02, 10).hold == 2.0
    pin.decide(3.3, 0.05, 0.0, 0.0, 0)
    assert pin.decide(3.4, 0.05, 0.5, 0.02, 10).hold == 4.0
    pin.decide(7.5, 0.05, 0.0, 0.0, 0)
    assert pin.decide(7.6, 0.05, 0.5, 0.02, 10).hold == 4.0
    # Long after the last re-pin: back to the shortest hold.
    pin.decide(11.7, 0.05, 0.0, 0.0, 0)
    assert pin.decide(40.0, 0.05, 0.5, 0.02, 10).hold == 1.0


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
    # GRPC_CPU_AFFINITY is off by default: the gRPC processes' threads may run where serve's may.
    serving, everywhere = _grpc_serving(server), _cpus(server.process.pid)
    assert len(everywhere) == 1 and _home(server.process.pid) is None, everywhere
    assert len(serving) == 2 and all(_cpus(pid) == everywhere for pid in serving), [_cpus(p) for p in serving]


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


def test_serve_refuses_an_unknown_affinity(settings):
    settings.HTTP_CPU_AFFINITY = "hard"
    with pytest.raises(CommandError, match="HTTP_CPU_AFFINITY must be soft or off, not 'hard'"):
        call_command("serve")


def test_rungrpc_refuses_an_unknown_affinity(settings):
    settings.GRPC_CPU_AFFINITY = "hard"
    with pytest.raises(CommandError, match="GRPC_CPU_AFFINITY must be soft or off, not 'hard'"):
        call_command("rungrpc", "--processes", "1")
