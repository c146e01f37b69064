"""Run a child process with a timeout that tells a hung child from a
machine that stopped running the tests.

CI machines are shared virtual machines. Once (2026-11-29, a fresh CI
machine) two unrelated children started within a second of each other,
``runworker --device cuda:0`` (which had already printed its refusal) and
``perf_analyzer`` against the session's server, both ran past their
timeouts (60 and 120 s), while the same commit passed everywhere else and
each child takes seconds. A stall of the whole machine explains both; a hang
of our code would not have hit two unrelated children at once. The next CI
run failed the same way (``runworker --device cuda:1``, ``perf_analyzer``)
while a second full test run was going on on the same two cores: a machine
that runs, but too busy to run a child in its time.

:func:`run` is ``subprocess.run(..., capture_output=True, text=True,
timeout=...)`` with two differences:

* a thread of this process notes the stalls of its own clock (a sleep of
  0.2 s that took over 2 s); when the timeout passed and the machine stalled
  for at least a quarter of it meanwhile, the command runs once more;
* so does a timeout during which the machine was too busy to run it: the
  kernel's pressure stall information (``/proc/pressure``) says some task
  waited for a CPU during at least ``BUSY_CPU`` of the time, or for memory
  during ``BUSY_MEMORY`` of it (a second test run on the same machine, say);
* any other timeout raises :class:`Hang`, a ``subprocess.TimeoutExpired``
  whose ``stderr`` holds the Python stacks of every thread of a Python
  child (``PYTHONFAULTHANDLER`` and SIGABRT), and whose message (what pytest
  prints) holds the end of that stderr, the stalls and pressure seen and the
  machine's busiest processes, so that a real hang names where it hung and a
  busy machine names what kept it busy.

The result's ``elapsed`` is the wall time of the attempt that answered,
less the stalls during it (seconds). :class:`Deadline` bounds a poll loop
the same way (``wait_for``, a live server's start).
"""

from __future__ import annotations

import functools
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

#: A sleep of TICK seconds that took over GAP seconds: the machine did not run this process meanwhile.
TICK = 0.2
GAP = 2.0
#: Shares of a timeout's window with some task waiting for a CPU, or for memory, that explain the timeout.
BUSY_CPU = 0.8
BUSY_MEMORY = 0.2
PRESSURE = Path("/proc/pressure")


class _Watch:
    """Stalls of this process's clock, as (start, end) in ``time.monotonic()``;
    ``start``: run the thread that notes them (off in the unit tests)."""

    def __init__(self, start: bool = True):
        self.stalls: list[tuple[float, float]] = []
        self.last = time.monotonic()  # the thread's last tick
        self._lock = threading.Lock()
        if start:
            threading.Thread(target=self._run, name="stall-watch", daemon=True).start()

    def _run(self) -> None:
        while True:
            time.sleep(TICK)
            now = time.monotonic()
            with self._lock:
                if now - self.last > GAP:
                    self.stalls.append((self.last, now))
                self.last = now

    def stalled(self, since: float, until: float) -> float:
        """Seconds of stall between ``since`` and ``until``, counting one
        still going on: the thread has not ticked for over GAP seconds (a
        timeout and the thread wake together when the machine runs again;
        the timeout may be read first)."""
        with self._lock:
            spans = self.stalls + ([(self.last, until)] if until - self.last > GAP else [])
            return sum(max(0.0, min(end, until) - max(start, since)) for start, end in spans)


@functools.cache
def watch() -> _Watch:
    """This process's watch (started on first use)."""
    return _Watch()


class Deadline:
    """``timeout`` seconds from now, not counting the machine's stalls
    meanwhile (a poll loop's bound: :func:`tests.support.live.wait_for`)."""

    def __init__(self, timeout: float):
        self.clock = watch()
        self.started = time.monotonic()
        self.timeout = timeout

    def elapsed(self) -> float:
        """Seconds since the start, less the machine's stalls."""
        now = time.monotonic()
        return now - self.started - self.clock.stalled(self.started, now)

    def passed(self) -> bool:
        return self.elapsed() >= self.timeout


def _is_python(args) -> bool:
    return os.path.basename(str(args[0])).startswith("python") or str(args[0]) == sys.executable


def pressure() -> dict[str, float]:
    """Seconds so far during which some task waited for each of ``cpu``,
    ``memory`` and ``io`` (the kernel's PSI "some" totals); a resource the
    kernel does not report is left out."""
    totals = {}
    for kind in ("cpu", "memory", "io"):
        try:
            some = (PRESSURE / kind).read_text().splitlines()[0]  # "some avg10=... total=<microseconds>"
            totals[kind] = int(some.rsplit("total=", 1)[1]) / 1e6
        except (OSError, IndexError, ValueError):
            pass
    return totals


def busy(before: dict[str, float], after: dict[str, float], wall: float) -> dict[str, float]:
    """The share of ``wall`` seconds during which some task waited for each resource."""
    return {kind: (after[kind] - before[kind]) / wall for kind in before.keys() & after.keys() if wall > 0}


def too_busy(shares: dict[str, float]) -> bool:
    """Whether the machine was too busy to run a child in its time (module doc)."""
    return shares.get("cpu", 0.0) >= BUSY_CPU or shares.get("memory", 0.0) >= BUSY_MEMORY


class Hang(subprocess.TimeoutExpired):
    """A child past its timeout that neither a stall nor a busy machine
    explains; its message ends with ``report`` (see the module doc)."""

    def __init__(self, args, timeout, output, stderr, report: str):
        super().__init__(args, timeout, output=output, stderr=stderr)
        self.report = report

    def __str__(self) -> str:
        return f"{super().__str__()}\n{self.report}"


def run(args: list, timeout: float, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(args, capture_output=True, text=True, timeout=timeout,
    env=env, **kwargs)``, once more after a timeout that a stall of the
    machine, or a machine too busy to run it, explains (see the module doc).
    Raises :class:`Hang` (a ``subprocess.TimeoutExpired``)."""
    env = dict(os.environ if env is None else env, PYTHONFAULTHANDLER="1")
    if _is_python(args):
        kwargs.setdefault("preexec_fn", _no_core)
    for last in (False, True):
        deadline, before = Deadline(timeout), pressure()
        child = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **kwargs)
        try:
            out, err = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            now = time.monotonic()
            wall, stalled = now - deadline.started, deadline.clock.stalled(deadline.started, now)
            shares = busy(before, pressure(), wall)
            waited = ", ".join(f"{kind} {share:.0%}" for kind, share in sorted(shares.items())) or "not reported"
            if not last and (stalled >= timeout / 4 or too_busy(shares)):
                _stop(child, args)
                print(f"the machine stalled for {stalled:.1f} s of {wall:.1f} s, tasks waited for {waited} of "
                      f"it: {args[0]} once more", file=sys.stderr)  # fmt: skip
                continue
            machine = _machine()  # before the child ends: it is among the processes
            out, err = _stop(child, args)
            note = f"\n[timed out after {wall:.1f} s; the machine stalled {stalled:.1f} s meanwhile]\n"
            tail = "\n".join((err or "").splitlines()[-40:])
            report = (f"the machine stalled {stalled:.1f} s of {wall:.1f} s; some task waited for {waited} of it\n"
                      f"{machine}\nthe end of the child's stderr:\n{tail}")  # fmt: skip
            raise Hang(args, timeout, out, (err or "") + note, report) from None
        done = subprocess.CompletedProcess(args, child.returncode, out, err)
        done.elapsed = deadline.elapsed()
        return done


def _machine() -> str:
    """The load average and the busiest processes now (``ps``), for a report."""
    try:
        load = Path("/proc/loadavg").read_text().strip()
        ps = subprocess.run(["ps", "-eo", "pid,ppid,stat,pcpu,rss,etime,args", "--sort=-pcpu", "--cols", "160"],
                            capture_output=True, text=True, timeout=10).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        return f"(the machine's state could not be read: {exc})"
    return f"load average {load}; the busiest processes:\n" + "\n".join(ps.splitlines()[:16])


def _no_core() -> None:
    """In the child: SIGABRT (the stacks, then the end) leaves no core file."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _stop(child: subprocess.Popen, args) -> tuple[str, str]:
    """End a child past its timeout (a Python child first prints its threads' stacks) and read what it wrote."""
    if _is_python(args):
        child.send_signal(signal.SIGABRT)
        try:
            return child.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    child.kill()
    return child.communicate()
