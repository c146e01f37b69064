"""Soft CPU affinity for the serving processes (``HTTP_CPU_AFFINITY``,
``GRPC_CPU_AFFINITY``).

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
the pin is soft: every ``period``, :class:`SoftPin` reads how many requests
the process had in flight (from the seconds of the requests it answered) and
how long its threads ran and waited in the run queue
(``/proc/self/task/*/schedstat``, the kernel's scheduler statistics). While
requests overlap, every thread may run on every allowed CPU again. When
the home CPU is full or shared with another busy process (long run-queue
waits), nothing the process sees tells whether a second CPU would serve
more (a gRPC channel's concurrent calls queue inside grpc core, where no
request is counted yet), so it probes: a moment on every CPU, and it keeps
the placement that answered more requests per second, for a hold that
doubles (up to ``max_hold``) while probes agree. Probes' outcomes are logged
at INFO, the rest at DEBUG.

Homes: the n-th process of a role (its rank among its parent's children,
by pid) gets the n-th allowed CPU, after an ``offset`` per role, so that
``serve``'s HTTP workers and gRPC processes spread over the CPUs.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from django.conf import settings

from inference.observability.metrics import SERVED

logger = logging.getLogger(__name__)


@dataclass
class Decision:
    """What :meth:`SoftPin.decide` asks for: ``"pin"``, ``"widen"`` or None
    (keep the placement), why, and the level to log it at (a probe's
    outcome: INFO, at most one per probe hold)."""

    action: str | None
    why: str = ""
    level: int = logging.DEBUG


@dataclass
class SoftPin:
    """The soft pin's policy (its thresholds, below) and state: pinned or
    wide, a probe under way, the probe hold (s) and the last intervals of
    the current placement.

    :meth:`decide` is the whole policy (no system calls), so that it can be
    tested on its own; :func:`start` applies it to the process's threads.
    """

    widen_above: float = 1.5
    pin_below: float = 1.1
    full_share: float = 0.9
    wait_share: float = 0.25
    long_wait: float = 100e-6
    probe_intervals: int = 4
    probe_gain: float = 1.05
    min_hold: float = 1.0
    max_hold: float = 32.0
    pinned: bool = field(default=False, init=False)
    wide_until: float = field(default=0.0, init=False)
    probing: bool = field(default=False, init=False)
    pinned_rate: float = field(default=0.0, init=False)  # requests/s pinned, before the probe under way
    cramped: str = field(default="", init=False)  # why the probe under way began
    hold: float = field(default=0.0, init=False)  # the probe hold
    won: bool | None = field(default=None, init=False)  # the last probe's outcome: wide served more
    next_probe: float = field(default=0.0, init=False)
    #: The last ``probe_intervals`` intervals of the current placement: (s, requests, why cramped).
    window: deque[tuple[float, int, str]] = field(init=False)

    def __post_init__(self) -> None:
        self.hold = self.min_hold
        self.window = deque(maxlen=self.probe_intervals)

    def decide(
        self,
        now: float,
        elapsed: float,
        in_flight: float,
        waited: float,
        runs: int,
        ran: float = 0.0,
        served: int = 0,
    ) -> Decision:
        """The action after an interval of ``elapsed`` seconds ending at
        monotonic time ``now``, in which the process had ``in_flight``
        requests under way on average, answered ``served`` requests, and its
        threads ran ``ran`` CPU seconds in all and waited ``waited`` seconds
        in the run queue before ``runs`` turns on a CPU.

        Pinned, it widens when requests overlap (more than ``widen_above``
        in flight: work that can run in parallel). The home CPU may also be
        cramped: full (the threads ran more than ``full_share`` of the
        interval) or shared (they waited more than ``wait_share`` of it,
        more than ``long_wait`` per turn: another busy process there, or the
        load generator woken onto it; the hand-offs between the process's own
        threads wait a few microseconds each). Whether a second CPU would
        then serve more, nothing the process sees tells (one request at a
        time, hand-offs on one CPU: no; a gRPC channel's calls queued in
        grpc core, which no request count shows: yes), so after
        ``probe_intervals`` cramped intervals with requests answered it
        tries: wide for ``probe_intervals`` intervals, it stays wide (for
        the probe hold) if it answered more than ``probe_gain`` times the
        requests per second of the pinned ones, and pins again (probing no
        sooner than the probe hold) if not; the hold doubles, up to
        ``max_hold``, while probes end the same way. Wide, it pins again
        once fewer than ``pin_below`` requests are in flight and the hold
        has ended."""
        cramped = ""
        if ran > self.full_share * elapsed:
            cramped = "full"
        elif waited > self.wait_share * elapsed and waited > self.long_wait * max(1, runs):
            cramped = f"shared (run-queue waits {waited / elapsed:.0%})"
        self.window.append((elapsed, served, cramped))
        if self.probing:
            return self._end_probe(now) if len(self.window) == self.probe_intervals else Decision(None)
        if not self.pinned:
            if now >= self.wide_until and in_flight < self.pin_below:
                return self._place(pinned=True, why=f"{in_flight:.2f} requests in flight")
            return Decision(None)
        if in_flight > self.widen_above:
            return self._place(pinned=False, why=f"{in_flight:.2f} requests in flight")
        ready = now >= self.next_probe and len(self.window) == self.probe_intervals
        if ready and all(why and n for _, n, why in self.window):
            self.pinned_rate, self.probing, self.cramped = self._rate(), True, cramped
            why = f"probing: the home CPU is {cramped} at {self.pinned_rate:.0f} req/s"
            return self._place(pinned=False, why=why)
        return Decision(None)

    def _rate(self) -> float:
        seconds = sum(elapsed for elapsed, _, _ in self.window)
        return sum(served for _, served, _ in self.window) / seconds if seconds > 0 else 0.0

    def _place(self, pinned: bool, why: str = "", level: int = logging.DEBUG) -> Decision:
        self.pinned = pinned
        self.window.clear()
        return Decision("pin" if pinned else "widen", why, level)

    def _end_probe(self, now: float) -> Decision:
        rate = self._rate()
        won = rate > self.probe_gain * self.pinned_rate
        self.hold = min(self.max_hold, self.hold * 2) if won == self.won else self.min_hold
        self.probing, self.won = False, won
        rates = f"{rate:.0f} req/s wide, {self.pinned_rate:.0f} pinned"
        why = f"probe of a {self.cramped} home CPU: {rates}; for {self.hold:.0f} s"
        if won:
            self.wide_until = now + self.hold
            return Decision(None, why, logging.INFO)
        self.next_probe = now + self.hold
        return self._place(pinned=True, why=why, level=logging.INFO)


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


def _schedstat(previous: dict[int, tuple[int, int, int]]) -> tuple[float, float, int]:
    """(CPU seconds the process's threads ran, seconds they waited in the run
    queue, times they were put on a CPU) since the last call (``previous``:
    each thread's totals so far, updated in place)."""
    ran = waited = runs = 0
    seen = {}
    for tid in _threads():
        try:
            with open(f"/proc/self/task/{tid}/schedstat", "rb") as handle:
                fields = handle.read().split()
            total = int(fields[0]), int(fields[1]), int(fields[2])
        except (OSError, ValueError, IndexError):
            continue
        seen[tid] = total
        before = previous.get(tid, (0, 0, 0) if previous else total)  # a thread started meanwhile: all of it
        ran += max(0, total[0] - before[0])
        waited += max(0, total[1] - before[1])
        runs += max(0, total[2] - before[2])
    previous.clear()
    previous.update(seen)
    return ran / 1e9, waited / 1e9, runs


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
        totals: dict[int, tuple[int, int, int]] = {}
        _schedstat(totals)
        last, (seconds, answered) = time.monotonic(), SERVED
        while True:
            time.sleep(period)
            now, (now_seconds, now_answered) = time.monotonic(), SERVED
            ran, waited, runs = _schedstat(totals)
            elapsed = now - last
            in_flight = (now_seconds - seconds) / elapsed
            decision = policy.decide(now, elapsed, in_flight, waited, runs, ran, now_answered - answered)
            last, seconds, answered = now, now_seconds, now_answered
            if decision.action == "pin":
                _set_all({home})
            elif decision.action == "widen":
                _set_all(everywhere)
            if decision.why:
                action = decision.action or "stays wide"
                logger.log(decision.level, "%s %d: %s (%s)", role, os.getpid(), action, decision.why)

    thread = threading.Thread(target=monitor, name=f"affinity-{role}", daemon=True)
    thread.start()
    return thread
