"""tests/support/stalls.py: a timeout during a stall of the machine runs the
command once more; a timeout without one is a hang, reported with the
child's Python stacks."""

from __future__ import annotations

import sys
import time

import pytest

from tests.support import stalls

#: First run (no marker file): make the marker, optionally stop the test process (the parent) for 3 s, as a
#: paused machine would, then hang. Later runs: print "second run" and exit 0.
CHILD = """
import os, signal, sys, time
marker, stop_parent = sys.argv[1], sys.argv[2] == "1"
if os.path.exists(marker):
    print("second run")
    sys.exit(0)
open(marker, "w").close()
if stop_parent:
    os.kill(os.getppid(), signal.SIGSTOP)
    time.sleep(3)
    os.kill(os.getppid(), signal.SIGCONT)
def waiting_forever():
    time.sleep(600)
waiting_forever()
"""


def test_a_timeout_while_the_machine_stalled_runs_the_command_once_more(tmp_path, capfd):
    marker = tmp_path / "marker"
    done = stalls.run([sys.executable, "-c", CHILD, str(marker), "1"], 5)
    assert (done.returncode, done.stdout) == (0, "second run\n")
    assert "the machine stalled for" in capfd.readouterr().err
    assert done.elapsed < 5


def test_a_timeout_without_a_stall_is_a_hang_with_the_child_s_stacks(tmp_path, monkeypatch):
    monkeypatch.setattr(stalls, "too_busy", lambda shares: False)  # however busy the test run keeps this machine
    marker = tmp_path / "marker"
    with pytest.raises(stalls.Hang) as info:
        stalls.run([sys.executable, "-c", CHILD, str(marker), "0"], 5)
    assert marker.exists()  # it ran once, not twice: the second run would have answered
    assert "in waiting_forever" in info.value.stderr  # faulthandler's stack of the hung child
    assert "the machine stalled 0.0 s meanwhile" in info.value.stderr
    message = str(info.value)  # what pytest prints: the stack's end and the machine's busiest processes
    assert "timed out after 5 seconds" in message and "in waiting_forever" in message
    assert "the busiest processes:" in message and "COMMAND" in message.split("the busiest processes:")[1]  # ps


def test_a_timeout_on_a_machine_too_busy_runs_the_command_once_more(tmp_path, monkeypatch, capfd):
    seen = []
    monkeypatch.setattr(stalls, "too_busy", lambda shares: seen.append(shares) or True)
    marker = tmp_path / "marker"
    done = stalls.run([sys.executable, "-c", CHILD, str(marker), "0"], 3)
    assert (done.returncode, done.stdout) == (0, "second run\n")
    assert len(seen) == 1 and set(seen[0]) <= {"cpu", "memory", "io"}
    assert "tasks waited for" in capfd.readouterr().err


def test_pressure_shares_and_the_busy_rule():
    assert stalls.busy({"cpu": 10.0, "memory": 1.0}, {"cpu": 58.0, "memory": 1.0, "io": 9.0}, 60.0) == {
        "cpu": 0.8,
        "memory": 0.0,
    }  # io: not read before, left out
    assert stalls.busy({"cpu": 1.0}, {"cpu": 2.0}, 0.0) == {}
    assert stalls.too_busy({"cpu": 0.8}) and stalls.too_busy({"cpu": 0.1, "memory": 0.2})
    assert not stalls.too_busy({"cpu": 0.79, "memory": 0.19, "io": 1.0}) and not stalls.too_busy({})


def test_pressure_reads_the_kernel_s_totals(tmp_path, monkeypatch):
    (tmp_path / "cpu").write_text("some avg10=1.00 avg60=2.00 avg300=3.00 total=2500000\nfull avg10=0 total=7\n")
    (tmp_path / "io").write_text("garbage\n")
    monkeypatch.setattr(stalls, "PRESSURE", tmp_path)
    assert stalls.pressure() == {"cpu": 2.5}  # memory missing, io unreadable: left out


def test_an_answer_in_time_is_returned_as_subprocess_run_returns_it():
    done = stalls.run(
        [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"], 30
    )
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
    assert 0 < done.elapsed < 30


def test_stalls_are_counted_within_the_window_and_one_still_going_on_counts():
    watch = stalls._Watch(start=False)
    watch.stalls = [(10.0, 14.0), (20.0, 23.0)]
    watch.last = 30.0
    assert watch.stalled(12.0, 21.0) == 3.0  # 12-14 and 20-21
    assert watch.stalled(15.0, 19.0) == 0.0
    assert watch.stalled(25.0, 31.0) == 0.0  # the thread ticked 1 s ago: no stall going on
    assert watch.stalled(25.0, 36.0) == 6.0  # no tick for 6 s: a stall going on since 30


def test_a_deadline_does_not_count_the_machine_s_stalls():
    deadline = stalls.Deadline(0.5)
    deadline.clock = stalls._Watch(start=False)  # its own, so that the stall set here reaches no other test
    deadline.clock.stalls = [(deadline.started, deadline.started + 0.4)]
    time.sleep(0.6)
    assert not deadline.passed()  # 0.6 s, 0.4 of them stalled
    time.sleep(0.4)
    assert deadline.passed()
