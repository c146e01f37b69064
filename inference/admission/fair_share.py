"""Fair admission to model versions: one team's burst never takes another's turn.

Every inference is charged to a *flow*: its caller's team, or, for a token
of no team, that token, or the one flow of anonymous callers
(:func:`flow_of`). Each model version a process runs has a :class:`Gate`
with ``seats``: how many of its requests this process lets run at once
(its instance group's count, times its ``max_batch_size`` with dynamic
batching, times the live workers that serve it in worker mode; see
:meth:`FairShare.gate`). A request takes a seat, or, when every seat is
taken, waits in its flow's queue at the gate. A seat that frees goes to the
next flow in turn (deficit round robin: each flow with waiting requests is
served ``weight`` requests per round, in the order flows started waiting),
so a flow that sends 400 requests at once gets the same turns as one that
sends one. This is Kubernetes' API Priority and Fairness applied to model
instances: flows, fair queuing, bounded queues.

Queues are bounded per flow and per process (``queue_per_flow``: the
requests one flow may have waiting at all gates of this process together;
what waits holds a server thread or, on gRPC's event loop, a coroutine); a
request over that bound is refused at once with
:class:`~inference.protocol.errors.RateLimited` (HTTP 429 with
``Retry-After``; gRPC RESOURCE_EXHAUSTED with ``retry-after``), counted in
``modelhost_throttled_requests_total{limit="fair_queue"}``, while the other
flows keep their turns. A request whose deadline passes while it waits
answers DEADLINE_EXCEEDED and was not run.

Each ensemble step takes a seat at its own model's gate (an ensemble of 300
steps waits 300 turns, not one); the requests of a sequence wait at their
model's gate like any other, so a sequence's backlog is bounded by its
flow's queue.

Both waiting styles share one gate: a thread blocks (:meth:`Gate.enter`),
an event loop awaits (:meth:`Gate.enter_async`). The fast path (a free seat
and nobody waiting) costs one lock round and no allocation.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable

from inference.observability import metrics as observability
from inference.protocol.errors import DeadlineExceeded, RateLimited

#: The flow of callers without a token.
ANONYMOUS_FLOW = "anonymous"
#: Retry-After of a request refused because its flow's queue is full (seats free as requests end).
QUEUE_FULL_RETRY_SECONDS = 1.0
#: Requests of one ensemble version a process runs at once (FairShare.ensemble_gate).
ENSEMBLE_SEATS = 2
#: How often a gate asks the executor for its seats again.
RESIZE_SECONDS = 1.0


def flow_of(principal) -> str:
    """The flow a caller's requests are queued in, from its rate-limit
    :class:`~inference.ports.Principal`: ``team:<name>``, ``token:<id>``
    for a token no team owns, or :data:`ANONYMOUS_FLOW`."""
    if principal.team:
        return f"team:{principal.team}"
    if principal.token:
        return f"token:{principal.token}"
    return ANONYMOUS_FLOW


def _label(flow: str) -> str:
    """The ``team`` label of a flow in metrics (a token's id is not a label value)."""
    if flow.startswith("team:"):
        return flow[5:]
    return "anonymous" if flow == ANONYMOUS_FLOW else "(no team)"


class _Waiter:
    """A request waiting for a seat: a thread's event or a loop's future."""

    __slots__ = ("cost", "event", "flow", "future", "granted", "loop")

    def __init__(self, flow: str, loop: asyncio.AbstractEventLoop | None, cost: int):
        self.flow = flow
        self.cost = cost
        self.granted = False
        self.loop = loop
        if loop is None:
            self.event, self.future = threading.Event(), None
        else:
            self.event, self.future = None, loop.create_future()

    def wake(self) -> None:
        """Tell the waiter it holds a seat (lock held)."""
        self.granted = True
        if self.loop is None:
            self.event.set()
            return
        try:
            same = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            same = False
        if same:
            _resolve(self.future)
        else:
            self.loop.call_soon_threadsafe(_resolve, self.future)


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(True)


class Gate:
    """The seats of one model version in this process and the flows waiting
    for them (see the module doc). ``name``: for messages."""

    __slots__ = ("_deficit", "_queues", "_ring", "_share", "checked", "free", "name", "seats", "waiting")

    def __init__(self, name: str, seats: int, share: FairShare):
        self.name = name
        self.seats = max(1, seats)
        self.free = self.seats
        self.waiting = 0
        self.checked = 0.0  # when its seats were last asked (time.monotonic())
        self._share = share
        self._queues: dict[str, deque[_Waiter]] = {}
        self._ring: deque[str] = deque()  # flows with waiting requests, in turn order
        self._deficit: dict[str, int] = {}

    def resize(self, seats: int) -> None:
        """Change the number of seats (the instance group or the workers changed)."""
        seats = max(1, seats)
        with self._share.lock:
            self.free += seats - self.seats
            self.seats = seats
            while self.free > 0 and self._ring:
                self.free -= 1
                self._grant_next()

    # -- taking a seat ---------------------------------------------------------
    def try_enter(self) -> bool:
        """Take a seat if one is free and nobody waits; never waits."""
        with self._share.lock:
            if self.free > 0 and not self.waiting:
                self.free -= 1
                return True
        return False

    def enter(self, flow: str, deadline: float | None = None, cost: int = 1) -> None:
        """Take a seat for a request of ``flow``, waiting in this thread for
        its turn (``deadline``: ``time.monotonic()`` seconds; ``cost``: the
        turns it takes, e.g. the steps of an ensemble segment run as one).
        Raises RateLimited (the flow's queue is full) or DeadlineExceeded
        (it was not run)."""
        waiter = self._seat_or_queue(flow, None, cost)
        if waiter is None:
            return
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        if waiter.event.wait(timeout):
            return
        self._abandon(waiter)

    async def enter_async(self, flow: str, deadline: float | None = None, cost: int = 1) -> None:
        """:meth:`enter` on an event loop (the wait is a future). A call
        cancelled while it waits gives up its place (or its seat)."""
        waiter = self._seat_or_queue(flow, asyncio.get_running_loop(), cost)
        if waiter is None:
            return
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            await asyncio.wait_for(asyncio.shield(waiter.future), timeout)
        except (TimeoutError, asyncio.CancelledError) as exc:
            self._abandon(waiter, cancelled=isinstance(exc, asyncio.CancelledError))

    def leave(self) -> None:
        """Give a seat back: to the next flow in turn, if any waits."""
        with self._share.lock:
            if self._ring:
                self._grant_next()
            else:
                self.free += 1

    def _seat_or_queue(self, flow: str, loop, cost: int) -> _Waiter | None:
        """None with a seat taken (one free and nobody waits), else the
        request's place in its flow's queue. Raises RateLimited."""
        with self._share.lock:
            if self.free > 0 and not self.waiting:
                self.free -= 1
                return None
            return self._enqueue(flow, loop, cost)

    # -- queues (lock held) ------------------------------------------------------
    def _enqueue(self, flow: str, loop, cost: int) -> _Waiter:
        share = self._share
        queued = share.queued.get(flow, 0)
        if queued >= share.queue_per_flow:
            observability.throttled(_label(flow), "fair_queue")
            raise RateLimited(
                f"fair share: {_describe(flow)} already has {queued} requests waiting for model instances in this "
                f"server process (at most {share.queue_per_flow}; every seat of {self.name} is taken); "
                f"other teams keep their turns",
                QUEUE_FULL_RETRY_SECONDS,
            )
        share.queued[flow] = queued + 1
        waiter = _Waiter(flow, loop, max(1, cost))
        queue = self._queues.get(flow)
        if queue is None:
            queue = self._queues[flow] = deque()
            self._deficit[flow] = 0 if self._ring else share.weight(flow)  # its quantum comes with its turn
            self._ring.append(flow)
        queue.append(waiter)
        self.waiting += 1
        return waiter

    def _grant_next(self) -> None:
        """Give one seat to the next waiting request in turn (deficit round
        robin: the flow at the head of the ring is served while its deficit
        covers its oldest request's cost; then the next flow's turn begins
        and adds its weight to its deficit)."""
        ring, deficit = self._ring, self._deficit
        while True:
            flow = ring[0]
            queue = self._queues[flow]
            waiter = queue[0]
            if deficit[flow] >= waiter.cost:
                break
            if len(ring) == 1:
                deficit[flow] = waiter.cost
                break
            ring.rotate(-1)
            deficit[ring[0]] += self._share.weight(ring[0])
        queue.popleft()
        self._dequeued(flow)
        if queue:
            deficit[flow] -= waiter.cost
        else:  # an idle flow keeps no credit
            ring.popleft()
            del self._queues[flow], deficit[flow]
            if ring:
                deficit[ring[0]] += self._share.weight(ring[0])
        waiter.wake()

    def _dequeued(self, flow: str) -> None:
        self.waiting -= 1
        share = self._share
        left = share.queued[flow] - 1
        if left:
            share.queued[flow] = left
        else:
            del share.queued[flow]

    def _abandon(self, waiter: _Waiter, cancelled: bool = False) -> None:
        """A waiter gives up (deadline or cancelled): out of its queue, or, if
        a seat reached it meanwhile, the seat goes back. Raises
        DeadlineExceeded unless it was cancelled (then CancelledError)."""
        with self._share.lock:
            granted = waiter.granted
            if not granted:
                queue = self._queues[waiter.flow]
                queue.remove(waiter)
                self._dequeued(waiter.flow)
                if not queue:
                    ring = self._ring
                    head = ring[0] == waiter.flow
                    ring.remove(waiter.flow)
                    del self._queues[waiter.flow], self._deficit[waiter.flow]
                    if head and ring:
                        self._deficit[ring[0]] += self._share.weight(ring[0])
        if granted:
            self.leave()
        if cancelled:
            raise asyncio.CancelledError()
        raise DeadlineExceeded(
            f"the request's deadline passed while it waited for its turn at {self.name}; it was not run"
        )


def _describe(flow: str) -> str:
    if flow.startswith("team:"):
        return f"team {flow[5:]}"
    return "anonymous callers" if flow == ANONYMOUS_FLOW else "this API token (no team)"


class FairShare:
    """The gates of this process (one per model version) and the flows'
    queue bound and weights (see the module doc).

    ``queue_per_flow``: requests one flow may have waiting in this process
    (0: none wait; a request that finds every seat taken is refused);
    ``weights``: flow -> requests served per round (default 1; settings
    name teams, ``FAIR_SHARE_WEIGHTS=ml=3,ops=1``); ``seats(target,
    placement)``: a version's seats (the executor's answer, at least 1).
    """

    def __init__(
        self,
        queue_per_flow: int,
        weights: dict[str, int] | None = None,
        seats: Callable | None = None,
        enabled: bool = True,
    ):
        self.queue_per_flow = max(0, queue_per_flow)
        self._weights = {
            (name if ":" in name or name == ANONYMOUS_FLOW else f"team:{name}"): max(1, int(w))
            for name, w in (weights or {}).items()
        }
        self._seats = seats
        self.enabled = enabled
        self.lock = threading.Lock()
        self.queued: dict[str, int] = {}  # flow -> requests waiting at any gate
        self._gates: dict[tuple, Gate] = {}

    def weight(self, flow: str) -> int:
        return self._weights.get(flow, 1)

    def gate(self, target, placement=()) -> Gate | None:
        """The gate of ``target`` (a RunTarget), made on first use; its seats
        are asked again at most every ``RESIZE_SECONDS`` (the instance group,
        batching or the live workers may change). None for a version that is
        not gated (no seats: sequence batching)."""
        if not self.enabled:
            return None
        gate = self._gates.get(target.key)
        now = time.monotonic()
        if gate is not None and now < gate.checked + RESIZE_SECONDS:
            return gate
        seats = self._seats(target, placement) if self._seats is not None else target.seats
        if seats <= 0:
            return None
        gate = self._made(target.key, target.describe(), seats)
        gate.checked = now
        if gate.seats != seats:
            gate.resize(seats)
        return gate

    def ensemble_gate(self, entry) -> Gate:
        """The gate of an ensemble's version (a VersionEntry with a plan):
        :data:`ENSEMBLE_SEATS` of its requests run at once in this process,
        each of their steps taking its turn at its own model's gate too. It
        bounds the threads one flow's long graphs keep busy (their Python
        between steps shares the process with everyone's requests)."""
        key = ("ensemble", entry.model_name, entry.number)
        gate = self._gates.get(key)
        if gate is None:
            seats = ENSEMBLE_SEATS if self.enabled else 1 << 30  # off: never waits
            gate = self._made(key, f"ensemble '{entry.model_name}' version {entry.number}", seats)
        return gate

    def _made(self, key: tuple, name: str, seats: int) -> Gate:
        """The gate under ``key``, made with ``seats`` if there is none yet."""
        with self.lock:
            gate = self._gates.get(key)
            if gate is None:
                gate = self._gates[key] = Gate(name, seats, self)
            return gate

    def forget(self, keys: set) -> None:
        """Drop the gates of versions not in ``keys`` that nobody uses."""
        with self.lock:
            for key in [k for k, g in self._gates.items() if k not in keys and g.free == g.seats and not g.waiting]:
                del self._gates[key]


class LoopLag:
    """Whether an event loop is behind: a tick it should run every
    ``PERIOD`` seconds is overdue by more than ``late`` seconds, or the last
    tick ran that late (it stays behind until a tick runs on time: uvloop
    runs due timers before the calls that arrived meanwhile, so there a
    held loop shows only in its tick's delay). A loop
    that runs requests inline (gRPC in process) sees only the calls it has
    taken; once it is behind, calls queue in gRPC's own FIFO, where a flood
    would come before everyone else: then requests wait at their gates
    (fairly) and run in threads, so the loop keeps taking calls. The tick
    runs only while requests come (it stops after a second without)."""

    PERIOD = 0.005

    def __init__(self, loop: asyncio.AbstractEventLoop, late: float = 0.005):
        self.loop = loop
        self.late = late
        self.last = loop.time()
        self.asked = self.last
        self._ticking = False
        self._late_tick = False  # the last tick ran more than ``late`` after its time

    def behind(self) -> bool:
        """Whether the loop is behind now (starts the tick if it was stopped)."""
        now = self.loop.time()
        self.asked = now
        if not self._ticking:
            self._ticking, self._late_tick = True, False
            self.last = now
            self.loop.call_later(self.PERIOD, self._tick)
            return False
        return self._late_tick or self._overdue(now)

    def _overdue(self, now: float) -> bool:
        """Whether the tick due ``PERIOD`` after the last one is more than ``late`` behind at ``now``."""
        return now - self.last > self.PERIOD + self.late

    def _tick(self) -> None:
        now = self.loop.time()
        self._late_tick = self._overdue(now)
        self.last = now
        if now - self.asked < 1.0:
            self.loop.call_later(self.PERIOD, self._tick)
        else:
            self._ticking = False
