"""The dynamic batcher's priority levels and queue policies, with Triton's
semantics, and a request's place in them.

Configuration (``dynamic_batching`` in config.pbtxt; Triton's
``ModelDynamicBatching`` and ``ModelQueuePolicy``, common
``protobuf/model_config.proto``):

- ``priority_levels``: the levels 1..N (1 the highest); 0: one queue.
  ``default_priority_level``: the level of a request that gives no
  priority, in 1..N when N > 0.
- ``default_queue_policy``: the policy of every level that
  ``priority_queue_policy`` (level -> policy) does not name.
- a policy: ``max_queue_size`` (requests a level holds, delayed ones
  included; 0: no bound; one more is refused at once), and a queue timeout:
  ``default_timeout_microseconds`` (0: none), which a request's own
  ``timeout`` may only shorten, and only with ``allow_timeout_override``;
  ``timeout_action`` REJECT (the request is refused: "Request timeout
  expired") or DELAY (it stays, served after the requests of its level
  that have not timed out).

Requests (Triton's schedule policy extension,
server ``docs/protocol/extension_schedule_policy.md``): ``priority`` 0, or
above ``priority_levels``, means the default level (core
``InferenceRequest::SetPriority``); ``timeout`` in microseconds.

:class:`PriorityQueue` holds a batcher's queued requests in service order
(core ``src/scheduler_utils.cc`` ``PriorityQueue``: per level, the requests
in arrival order, then the delayed ones).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain

from inference.protocol.errors import ModelNotReady, QueueFull

#: One past the largest uint64 (the config's levels and timeouts are uint64, queue sizes uint32).
UINT64_END = 1 << 64
#: Triton's error texts (core src/scheduler_utils.cc, src/dynamic_batch_scheduler.cc), which clients match.
QUEUE_FULL = "Exceeds maximum queue size"
TIMED_OUT = "Request timeout expired"


class QueuePolicyError(ValueError):
    """Priority levels or queue policies Triton (or this server) refuses."""


@dataclass(frozen=True)
class QueuePolicy:
    """Triton's ``ModelQueuePolicy``: ``delay`` (``timeout_action: DELAY``,
    else REJECT), ``timeout_us`` (``default_timeout_microseconds``, 0: none),
    ``allow_override`` (``allow_timeout_override``), ``max_size``
    (``max_queue_size``, 0: no bound)."""

    delay: bool = False
    timeout_us: int = 0
    allow_override: bool = False
    max_size: int = 0

    @classmethod
    def from_config(cls, doc: dict | None, where: str) -> QueuePolicy:
        """A policy from its JSON form (proto field names; integers as
        numbers or strings, the action by name or number). Raises
        QueuePolicyError naming ``where``."""
        doc = doc or {}
        action = doc.get("timeout_action", "REJECT")
        if action not in ("REJECT", "DELAY", 0, 1):
            raise QueuePolicyError(f"{where}: timeout_action is REJECT or DELAY, got {action!r}")
        return cls(
            delay=action in ("DELAY", 1),
            timeout_us=_uint(doc.get("default_timeout_microseconds", 0), f"{where}.default_timeout_microseconds"),
            allow_override=bool(doc.get("allow_timeout_override", False)),
            max_size=_uint(doc.get("max_queue_size", 0), f"{where}.max_queue_size", 1 << 32),
        )

    def timeout_us_for(self, requested_us: int) -> int:
        """A request's queue timeout in microseconds (0: none): the default,
        or the request's ``timeout`` when the policy allows an override and
        it is shorter (core ``PolicyQueue::Enqueue``: it never lengthens the
        default, nor sets one where the default is none)."""
        if self.allow_override and 0 < requested_us < self.timeout_us:
            return requested_us
        return self.timeout_us


@dataclass(frozen=True)
class PriorityLevels:
    """A dynamic batcher's levels: ``levels`` (``priority_levels``, 0: one
    queue, level 0), ``default_level`` (``default_priority_level``),
    ``default`` (``default_queue_policy``) and ``policies``
    (``priority_queue_policy``: (level, policy) pairs)."""

    levels: int = 0
    default_level: int = 0
    default: QueuePolicy = QueuePolicy()
    policies: tuple[tuple[int, QueuePolicy], ...] = ()

    @classmethod
    def from_config(cls, doc: dict | None, preserve_ordering: bool = False) -> PriorityLevels:
        """The levels of a ``dynamic_batching`` message in its JSON form,
        checked with Triton's rules (core ``ValidateModelConfig``) and
        messages; also refused: a level's policy or a default level given
        without ``priority_levels`` (Triton ignores them). Raises
        QueuePolicyError."""
        doc = doc or {}
        levels = _uint(doc.get("priority_levels", 0), "priority_levels")
        default_level = _uint(doc.get("default_priority_level", 0), "default_priority_level")
        default = QueuePolicy.from_config(doc.get("default_queue_policy"), "default_queue_policy")
        given = doc.get("priority_queue_policy") or {}
        policies = []
        for key, value in given.items():
            level = _uint(key, "priority_queue_policy key")
            policies.append((level, QueuePolicy.from_config(value, f"priority_queue_policy[{level}]")))
        policies.sort()
        if levels == 0 and (default_level or policies):
            what = "default_priority_level" if default_level else "priority_queue_policy"
            raise QueuePolicyError(f"{what} needs priority_levels (the number of levels); with none it has no effect")
        if levels and not 1 <= default_level <= levels:
            raise QueuePolicyError(f"default priority level must be in range [1, {levels}]")
        for level, _ in policies:
            if not 1 <= level <= levels:
                raise QueuePolicyError(f"priority queue policy must have priority level in range [1, {levels}]")
        if preserve_ordering:
            if levels > 1:
                raise QueuePolicyError("Only one priority level is allowed when 'preserve_ordering' is true")
            if any(p.delay and p.timeout_us for p in (default, *(p for _, p in policies))):
                raise QueuePolicyError(
                    "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true"
                )
        return cls(levels, default_level, default, tuple(policies))

    @property
    def configured(self) -> bool:
        """Whether the config asks for levels or a queue policy (else: one unbounded queue, no timeouts)."""
        return bool(self.levels or self.policies or self.default != QueuePolicy())

    def level(self, priority: int) -> int:
        """The level of a request's ``priority`` parameter (0, or above
        ``levels``: the default level; Triton's ``SetPriority``)."""
        if priority == 0 or priority > self.levels:
            return self.default_level
        return priority

    def policy(self, level: int) -> QueuePolicy:
        """The queue policy of ``level``."""
        for number, policy in self.policies:
            if number == level:
                return policy
        return self.default

    def queue_timeout(self, priority: int) -> bool:
        """Whether a request of ``priority`` uses its ``timeout`` as its
        queue timeout (its level allows an override), rather than as a
        deadline."""
        return self.policy(self.level(priority)).allow_override


#: One queue, unbounded, without timeouts (a dynamic batcher configured without levels or policies).
ONE_QUEUE = PriorityLevels()


@dataclass(frozen=True, slots=True)
class Schedule:
    """A request's ``priority`` and ``timeout`` (microseconds) parameters, 0 when not given."""

    priority: int = 0
    timeout_us: int = 0


class PriorityQueue:
    """Queued requests of one batcher, per level, in service order.

    An item has ``level`` (set here), ``expires`` (its queue timeout on
    ``time.monotonic()``, or None) and ``delayed`` (set here). Not
    thread-safe: the batcher holds its lock."""

    def __init__(self, levels: PriorityLevels, describe: str):
        self.levels = levels
        self.describe = describe  # "version 1 of model 'm'", for errors
        self._policies = dict(levels.policies)
        self._plain = not levels.configured
        self._queues: dict[int, tuple[deque, deque]] = {}  # level -> (in arrival order, delayed)
        self._lanes: list[deque] = []  # the deques in service order: level 1's two, level 2's two, ...
        self._size = 0
        self._timed = 0  # waiting (not delayed) items with a queue timeout: none, no scan

    def push(self, item, schedule: Schedule | None) -> None:
        """Queue ``item`` at its level with its queue timeout. Raises
        QueueFull (Triton's text) when its level holds ``max_queue_size``."""
        item.delayed = False
        if self._plain:  # one queue, no bound, no timeouts
            item.level, item.expires, item.rejects = 0, None, True
            self._lane(0)[0].append(item)
            self._size += 1
            return
        priority, requested = (schedule.priority, schedule.timeout_us) if schedule is not None else (0, 0)
        level = self.levels.level(priority)
        policy = self._policies.get(level, self.levels.default)
        pair = self._lane(level)
        if policy.max_size and len(pair[0]) + len(pair[1]) >= policy.max_size:
            where = f"priority level {level} of " if self.levels.levels else ""
            raise QueueFull(
                f"{QUEUE_FULL}: the queue of {where}{self.describe} holds its max_queue_size "
                f"of {policy.max_size} request(s)"
            )
        timeout_us = policy.timeout_us_for(requested)
        item.level = level
        item.expires = time.monotonic() + timeout_us / 1e6 if timeout_us else None
        item.rejects = not policy.delay
        pair[0].append(item)
        self._size += 1
        if timeout_us:
            self._timed += 1

    def _lane(self, level: int) -> tuple[deque, deque]:
        """The (waiting, delayed) deques of ``level``, made on first use."""
        pair = self._queues.get(level)
        if pair is None:
            pair = self._queues[level] = (deque(), deque())
            self._lanes = [lane for number in sorted(self._queues) for lane in self._queues[number]]
        return pair

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator:
        """The items in service order: by level, each level's waiting ones, then its delayed ones."""
        return chain.from_iterable(self._lanes)

    def first(self):
        """The item served next (the queue is not empty)."""
        for lane in self._lanes:
            if lane:
                return lane[0]
        raise IndexError("the queue is empty")

    def remove(self, item) -> bool:
        """Take ``item`` out; False when it is not queued."""
        pair = self._queues.get(getattr(item, "level", None))
        if pair is None:
            return False
        try:
            pair[1 if item.delayed else 0].remove(item)
        except ValueError:
            return False
        self._size -= 1
        if item.expires is not None and not item.delayed:
            self._timed -= 1
        if not pair[0] and not pair[1]:
            self._forget(item.level)
        return True

    def _forget(self, level: int) -> None:
        """Drop the empty deques of a level no policy names (as Triton
        erases them), so that requests naming many levels leave nothing behind."""
        if level in self._policies or level == self.levels.default_level:
            return
        del self._queues[level]
        self._lanes = [lane for number in sorted(self._queues) for lane in self._queues[number]]

    def clear(self) -> list:
        """Take every item out (in service order)."""
        items = list(self)
        for waiting, delayed in self._queues.values():
            waiting.clear()
            delayed.clear()
        self._size = self._timed = 0
        return items

    def expire(self, now: float) -> list:
        """Apply the queue timeouts passed at ``now``: a DELAY item moves
        behind its level's others, a REJECT item is taken out; returns those."""
        rejected = []
        if not self._timed:
            return rejected
        for level, (waiting, delayed) in list(self._queues.items()):
            if not any(item.expires is not None and item.expires <= now for item in waiting):
                continue
            kept = [item for item in waiting if item.expires is None or item.expires > now]
            for item in waiting:
                if item.expires is not None and item.expires <= now:
                    self._timed -= 1
                    if item.rejects:
                        self._size -= 1
                        rejected.append(item)
                    else:
                        item.delayed = True
                        delayed.append(item)
            waiting.clear()
            waiting.extend(kept)
            if not waiting and not delayed:
                self._forget(level)
        return rejected

    def next_expiry(self) -> float | None:
        """When the next queue timeout passes (``time.monotonic()``), or None."""
        if not self._timed:
            return None
        times = [item.expires for waiting, _ in self._queues.values() for item in waiting if item.expires is not None]
        return min(times, default=None)


def timed_out(describe: str) -> ModelNotReady:
    """The error of a request refused when its queue timeout passed (REJECT;
    Triton's text, UNAVAILABLE) in the queue of ``describe`` (a model version)."""
    return ModelNotReady(
        f"{TIMED_OUT}: the request waited in the queue of {describe} past its queue timeout; it was not run"
    )


def _uint(value, where: str, end: int = UINT64_END) -> int:
    """A config integer (a number or its text) in [0, end). Raises QueuePolicyError."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise QueuePolicyError(f"{where} must be an unsigned integer, got {value!r}") from None
    if isinstance(value, bool) or not 0 <= number < end:
        raise QueuePolicyError(f"{where} must be an unsigned integer below {end}, got {value!r}")
    return number
