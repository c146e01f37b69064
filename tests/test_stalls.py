"""tests/support/stalls.py: a timeout during a stall of the machine runs the
command once more; a timeout without one is a hang, reported with the
child's Python stacks."""

from __future__ import annotations

import subprocess
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


def test_a_timeout_without_a_stall_is_a_hang_with_the_child_s_stacks(tmp_path):
    marker = tmp_path / "marker"
    with pytest.raises(subprocess.TimeoutExpired) as info:
        stalls.run([sys.executable, "-c", CHILD, str(marker), "0"], 5)
    assert marker.exists()  # it ran once, not twice: the second run would have answered
    assert "in waiting_forever" in info.value.stderr  # faulthandler's stack of the hung child
    assert "the machine stalled 0.0 s meanwhile" in info.value.stderr


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
