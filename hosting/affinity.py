"""Soft CPU affinity for the serving processes (``SERVING_CPU_AFFINITY``).

A small request is a chain of hand-offs between one process's threads:
granian's I/O thread and the Python thread that runs the application; grpc
core's threads, grpc.aio's poller thread and the event loop. On a machine
with an idle CPU, Linux wakes each thread on the idle one, so every hand-off
pays a cross-CPU wake-up (on a virtual machine, the idle vCPU's too) and
cold caches. Keeping each serving process's threads on one CPU, its *home*,
takes ~60 us off a small gRPC request and ~30 us off a REST one at
concurrency 1 (bench/README.md, "CPU affinity").

A pinned process cannot use a second CPU when it has parallel work (a
gRPC client sending many calls on one channel, large decodes in threads), so
the pin is soft: :class:`SoftPin` reads how long the process's threads
waited in the run queue (``/proc/self/task/*/schedstat``, the kernel's
scheduler statistics) every ``period``; once they waited more than
``widen_share`` of it, every thread may run on every allowed CPU again, for
a hold that doubles (up to ``max_hold``) each time contention comes back
soon after the pin returned, and is pinned again when the hold ends.

Homes: the n-th process of a role (its rank among its parent's children,
by pid) gets the n-th allowed CPU, after an ``offset`` per role, so that
``serve``'s HTTP workers and gRPC processes spread over the CPUs.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

from django.conf import settings

from inference.observability.metrics import SERVED_SECONDS


@dataclass
class Decision:
    """What :meth:`SoftPin.decide` asks for: ``"pin"``, ``"widen"`` or None."""

    action: str | None
    hold: float = 0.0


@dataclass
class SoftPin:
    """The soft pin's policy (its thresholds, below) and state: pinned or
    wide, the current hold (s) after contention and when it ends.

    :meth:`decide` is the whole policy (no system calls), so that it can be
    tested on its own; :func:`start` applies it to the process's threads.
    """

    widen_above: float = 1.5
    pin_below: float = 1.1
    widen_share: float = 0.25
    long_wait: float = 100e-6
    min_hold: float = 1.0
    max_hold: float = 32.0
    pinned: bool = field(default=False, init=False)
    hold: float = field(default=0.0, init=False)
    wide_until: float = field(default=0.0, init=False)
    pinned_at: float = field(default=0.0, init=False)
    contended: bool = field(default=False, init=False)  # widened for contention before

    def __post_init__(self) -> None:
        self.hold = self.min_hold

    def decide(self, now: float, elapsed: float, in_flight: float, waited: float, runs: int) -> Decision:
        """The action after an interval of ``elapsed`` seconds ending at
        monotonic time ``now``, in which the process had ``in_flight``
        requests under way on average and its threads waited ``waited``
        seconds in the run queue before ``runs`` turns on a CPU.

        Pinned, it widens when requests overlap (more than ``widen_above``
        in flight: work that can run in parallel), or when its threads were
        kept from their CPU (they waited more than ``widen_share`` of the
        interval, more than ``long_wait`` per turn: another busy process on
        the home CPU; the hand-offs between the process's own threads wait a
        few microseconds each) for a hold that doubles while that comes back
        soon after each re-pin. Wide, it pins again once fewer than
        ``pin_below`` requests are in flight and the hold has ended."""
        if not self.pinned:
            if now >= self.wide_until and in_flight < self.pin_below:
                self.pinned, self.pinned_at = True, now
                return Decision("pin")
            return Decision(None)
        if in_flight > self.widen_above:
            self.pinned = False
            return Decision("widen")
        if waited > self.widen_share * elapsed and waited > self.long_wait * max(1, runs):
            recent = self.contended and now - self.pinned_at < 2 * self.hold  # again right after re-pinning
            self.hold = min(self.max_hold, self.hold * 2) if recent else self.min_hold
            self.pinned, self.wide_until, self.contended = False, now + self.hold, True
            return Decision("widen", self.hold)
        return Decision(None)


def rank_among_siblings() -> int:
    """This process's rank, by pid, among its parent's children (0 when
    they cannot be read): the n-th worker a server started."""
    parent = os.getppid()
    try:
        with open(f"/proc/{parent}/task/{parent}/children") as handle:
            children = sorted(int(pid) for pid in handle.read().split())
    except (OSError, ValueError):
        return 0
    return children.index(os.getpid()) if os.getpid() in children else 0


MODES = ("soft", "off")


def unknown_mode(*names: str) -> str | None:
    """The error for the first of the settings ``names`` (HTTP_CPU_AFFINITY,
    GRPC_CPU_AFFINITY) whose value is not one of :data:`MODES`, or None."""
    for name in names:
        if getattr(settings, name) not in MODES:
            return f"{name} must be soft or off, not {getattr(settings, name)!r}"
    return None


def _threads() -> list[int]:
    try:
        return [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        return []


def _set_all(cpus: set[int]) -> None:
    for tid in _threads():
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:  # the thread ended meanwhile
            continue


def _run_queue(previous: dict[int, tuple[int, int]]) -> tuple[float, int]:
    """(seconds the process's threads waited in the run queue, times they
    were put on a CPU) since the last call (``previous``: each thread's
    totals so far, updated in place)."""
    waited = runs = 0
    seen = {}
    for tid in _threads():
        try:
            with open(f"/proc/self/task/{tid}/schedstat", "rb") as handle:
                fields = handle.read().split()
            total = int(fields[1]), int(fields[2])
        except (OSError, ValueError, IndexError):
            continue
        seen[tid] = total
        before = previous.get(tid, total)
        waited += max(0, total[0] - before[0])
        runs += max(0, total[1] - before[1])
    previous.clear()
    previous.update(seen)
    return waited / 1e9, runs


def home_cpu(cpus: list[int], offset: int = 0) -> int | None:
    """The CPU of ``cpus`` (the allowed ones, sorted) this process keeps its
    threads on (None: only one allowed)."""
    if len(cpus) < 2:
        return None
    return cpus[(rank_among_siblings() + offset) % len(cpus)]


def start(role: str, offset: int = 0, period: float = 0.05) -> threading.Thread | None:
    """Keep this process's threads on its home CPU, softly (see the module):
    a daemon thread applies :class:`SoftPin` every ``period`` seconds.
    Returns the thread, or None when one CPU is allowed (nothing to choose)."""
    everywhere = os.sched_getaffinity(0)
    home = home_cpu(sorted(everywhere), offset)
    if home is None:
        return None
    policy = SoftPin()

    def monitor() -> None:
        totals: dict[int, tuple[int, int]] = {}
        _run_queue(totals)
        last, served = time.monotonic(), SERVED_SECONDS[0]
        while True:
            time.sleep(period)
            now, now_served = time.monotonic(), SERVED_SECONDS[0]
            waited, runs = _run_queue(totals)
            decision = policy.decide(now, now - last, (now_served - served) / (now - last), waited, runs)
            last, served = now, now_served
            if decision.action == "pin":
                _set_all({home})
            elif decision.action == "widen":
                _set_all(everywhere)

    thread = threading.Thread(target=monitor, name=f"affinity-{role}", daemon=True)
    thread.start()
    return thread
