"""Per-team and per-token rate limits and in-flight caps on inference.

Each inference is charged to its caller (:class:`~inference.ports.Principal`,
from the installed authorizer): the caller's team (or, for a token with no
team to charge, its user's own bucket under the team defaults), its API
token, or the one bucket every anonymous caller shares. Each of those has a quota
(:class:`~inference.ports.Quota`): a request rate with a burst (GCRA, the
token bucket as arrival times: smooth, one number per bucket) and a cap on
inferences in flight. A team's own quota, set by operators, wins over the
defaults from settings. Over a limit the call raises
:class:`~inference.protocol.errors.RateLimited` (HTTP 429 with
``Retry-After``; gRPC RESOURCE_EXHAUSTED) and is counted in
``modelhost_throttled_requests_total{team, limit}``.

A call costs one request of the rate, or ``cost`` requests
(:meth:`RateLimiter.admit`); an admitted call can be charged more before it
does the work (:meth:`Admission.charge`: a request to an N-step ensemble
costs N, inference/ensembles/runs.py). A call costing more than a bucket's
burst is admitted only when the bucket is full, and leaves the bucket in
debt for the rest: the long-run rate holds exactly, and no call is refused
for ever. An in-flight cap counts calls (one slot each, whatever their
cost).

Stores:

- :class:`RedisStore` (``REDIS_URL``, or ``RATE_LIMIT_REDIS_URL``): one Lua
  script checks every bucket of a call and takes its in-flight slots
  atomically, in one round trip, so every process of every machine shares
  the limits; a slot is a member of a sorted set scored by its expiry, so a
  process that dies holding slots frees them after ``lease_seconds``.
  Release is one more round trip (only with an in-flight cap).
- :class:`MemoryStore` (no Redis: the embedded mode on one machine): the
  same arithmetic in this process; each server process then enforces the
  limits on its own share of the traffic (documented).

When no quota applies to a call (the defaults are 0 and the team has none)
nothing is checked: no lock, no round trip. When the shared store fails
(Redis away) calls are admitted unchecked, with a log line every 10 s:
limits protect the platform's fairness, not its availability.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field, replace

from inference.observability import metrics as observability
from inference.observability.outage import DependencyWatch
from inference.ports import Principal, Quota
from inference.protocol.errors import RateLimited

logger = logging.getLogger(__name__)

#: Retry-After of a call refused for its in-flight cap (slots free as inferences end).
IN_FLIGHT_RETRY_SECONDS = 1.0


@dataclass(frozen=True)
class Defaults:
    """Quotas that apply unless a team has its own (operators' settings)."""

    team: Quota = field(default_factory=Quota)
    token: Quota = field(default_factory=Quota)
    anonymous: Quota = field(default_factory=Quota)

    @property
    def limited(self) -> bool:
        return self.team.limited or self.token.limited or self.anonymous.limited


@dataclass(frozen=True)
class Bucket:
    key: str  # store key
    limit: str  # metrics label: team_rate, token_in_flight, anonymous_rate, ...
    who: str  # for messages: "team ml", "API token abc...", "anonymous callers"
    quota: Quota


class Admission:
    """An admitted call; :meth:`release` (or leaving the ``with`` block) frees
    its in-flight slots. A no-op for calls that took none. :meth:`charge`
    charges it more of its rate limits."""

    __slots__ = ("_buckets", "_charged", "_lease", "_limiter", "_principal", "_slots", "_store")

    @property
    def holds(self) -> bool:
        """Whether it holds in-flight slots (release then talks to the store)."""
        return bool(self._slots)

    def __init__(
        self, store=None, slots: tuple[str, ...] = (), lease: str = "", limiter: RateLimiter | None = None,
        principal: Principal | None = None, buckets: tuple[Bucket, ...] = (), charged: int = 0,
    ):  # fmt: skip
        self._store = store
        self._slots = slots
        self._lease = lease
        self._limiter = limiter
        self._principal = principal
        self._buckets = buckets  # the call's buckets with a rate (charge() takes more of them)
        self._charged = charged  # requests of the rate charged so far

    @property
    def charge_blocks(self) -> bool:
        """Whether :meth:`charge` may wait on the network (a shared store to ask)."""
        return bool(self._buckets) and self._limiter.blocking

    def charge(self, cost: int, what: str = "") -> None:
        """Charge the call ``cost`` more requests of its rate limits, all or
        none (``what``: what they pay for, for the refusal's message). Takes
        no in-flight slot. Raises RateLimited (counted in metrics) when a
        bucket cannot take them now: then nothing more is charged, and its
        ``retry_after`` is when the whole call (what it was charged, and
        ``cost``) fits. A no-op for a call with no rate limit."""
        if cost <= 0 or not self._buckets:
            return
        self._limiter.take(self._principal, self._buckets, self._lease, cost, self._charged, False, what)
        self._charged += cost

    def release(self) -> None:
        if self._slots:
            slots, self._slots = self._slots, ()
            try:
                self._store.release(slots, self._lease)
            except Exception:  # the slot expires by itself
                logger.exception("releasing in-flight slots failed; they expire by themselves")

    def __enter__(self) -> Admission:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


NOTHING = Admission()


def _burst(quota: Quota) -> int:
    return quota.burst if quota.burst > 0 else max(1, int(quota.rate))


def _gcra(tat: float, now: float, quota: Quota, cost: int, held: int) -> tuple[float, float]:
    """(the bucket's new theoretical arrival time, 0) when it takes ``cost``
    requests of a call charged ``held`` already, else (``tat``, seconds
    until the whole call fits). A call needs room for its cost, at most the
    burst (then the bucket must be full: see the module doc)."""
    interval, burst = 1.0 / quota.rate, _burst(quota)
    start = max(tat, now)
    needed = max(0, min(cost, burst - held))
    if start + (needed - burst) * interval > now:
        return tat, start + (min(cost + held, burst) - burst) * interval - now
    return start + cost * interval, 0.0


class MemoryStore:
    """Buckets in this process (see module doc)."""

    blocking = False

    def __init__(self):
        self._lock = threading.Lock()
        self._tat: dict[str, float] = {}  # key -> theoretical arrival time (monotonic seconds)
        self._in_flight: dict[str, int] = {}

    def acquire(
        self, buckets: list[Bucket], lease: str, cost: int = 1, held: int = 0, slots: bool = True
    ) -> tuple[Bucket | None, float, str]:
        """Take ``cost`` requests (of a call charged ``held`` already) from
        every bucket and, with ``slots``, an in-flight slot, or nothing:
        (the bucket that refused, seconds to wait, "rate" or "in_flight")
        or (None, 0, "")."""
        now = time.monotonic()
        with self._lock:
            updates = {}
            for bucket in buckets:
                quota = bucket.quota
                if quota.rate > 0:
                    tat, wait = _gcra(self._tat.get(bucket.key, now), now, quota, cost, held)
                    if wait:
                        return bucket, wait, "rate"
                    updates[bucket.key] = tat
                if slots and quota.in_flight > 0 and self._in_flight.get(bucket.key, 0) >= quota.in_flight:
                    return bucket, IN_FLIGHT_RETRY_SECONDS, "in_flight"
            self._tat.update(updates)
            for bucket in buckets:
                if slots and bucket.quota.in_flight > 0:
                    self._in_flight[bucket.key] = self._in_flight.get(bucket.key, 0) + 1
        return None, 0.0, ""

    def release(self, keys: tuple[str, ...], lease: str) -> None:
        with self._lock:
            for key in keys:
                self._in_flight[key] = max(0, self._in_flight.get(key, 0) - 1)


# KEYS: per bucket, its rate key and its in-flight key. ARGV: lease id, lease
# ms, the call's cost and what it was charged already (_gcra), then per
# bucket: rate, burst, in-flight cap (0: take no slot), and last the wait of
# an in-flight refusal (ms). Returns {refused bucket index (1-based, 0:
# admitted), wait in ms, 1 for the rate or 2 for the in-flight cap}.
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease, lease_ms = ARGV[1], tonumber(ARGV[2])
local cost, held = tonumber(ARGV[3]), tonumber(ARGV[4])
local n = #KEYS / 2
local tats = {}
for i = 1, n do
  local rate, burst, cap = tonumber(ARGV[3*i+2]), tonumber(ARGV[3*i+3]), tonumber(ARGV[3*i+4])
  if rate > 0 then
    local interval = 1000 / rate
    local tat = tonumber(redis.call('GET', KEYS[2*i-1]) or now)
    if tat < now then tat = now end
    local needed = math.max(0, math.min(cost, burst - held))
    if tat + (needed - burst) * interval > now then
      return {i, math.ceil(tat + (math.min(cost + held, burst) - burst) * interval - now), 1}
    end
    tats[i] = tat + cost * interval
  end
  if cap > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[2*i], '-inf', now)
    if redis.call('ZCARD', KEYS[2*i]) >= cap then return {i, tonumber(ARGV[#ARGV]), 2} end
  end
end
for i = 1, n do
  if tats[i] then redis.call('SET', KEYS[2*i-1], tats[i], 'PX', math.ceil(tats[i] - now) + 1000) end
  if tonumber(ARGV[3*i+4]) > 0 then
    redis.call('ZADD', KEYS[2*i], now + lease_ms, lease)
    redis.call('PEXPIRE', KEYS[2*i], lease_ms)
  end
end
return {0, 0, 0}
"""


class RedisStore:
    """Buckets in Redis, shared by every process (see module doc)."""

    blocking = True

    def __init__(self, client, prefix: str = "modelhost:ratelimit:", lease_seconds: float = 120.0):
        self.client = client
        self.prefix = prefix
        self.lease_ms = int(lease_seconds * 1000)
        self._acquire = client.register_script(_ACQUIRE)

    def acquire(
        self, buckets: list[Bucket], lease: str, cost: int = 1, held: int = 0, slots: bool = True
    ) -> tuple[Bucket | None, float, str]:
        """As :meth:`MemoryStore.acquire`, in one round trip."""
        keys, args = [], [lease, self.lease_ms, cost, held]
        for bucket in buckets:
            keys += [f"{self.prefix}rate:{bucket.key}", f"{self.prefix}flight:{bucket.key}"]
            args += [bucket.quota.rate, _burst(bucket.quota), bucket.quota.in_flight if slots else 0]
        args.append(int(IN_FLIGHT_RETRY_SECONDS * 1000))
        index, wait_ms, kind = self._acquire(keys=keys, args=args)
        if int(index) == 0:
            return None, 0.0, ""
        return buckets[int(index) - 1], int(wait_ms) / 1000, "rate" if int(kind) == 1 else "in_flight"

    def release(self, keys: tuple[str, ...], lease: str) -> None:
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.zrem(f"{self.prefix}flight:{key}", lease)
        pipe.execute()


class RateLimiter:
    """Admits inferences within their callers' quotas (see module doc)."""

    def __init__(self, defaults: Defaults, store=None):
        self.defaults = defaults
        self.store = store or MemoryStore()
        self.store_watch = DependencyWatch("the rate limits' store (Redis)", logger)

    @property
    def blocking(self) -> bool:
        """Whether :meth:`admit` may wait on the network (an event loop runs it in a thread)."""
        return self.store.blocking

    def blocks_for(self, principal: Principal) -> bool:
        """Whether admitting ``principal`` may wait on the network."""
        return self.store.blocking and bool(self.buckets(principal))

    def buckets(self, principal: Principal) -> list[Bucket]:
        """The buckets a call by ``principal`` is counted in (only limited ones)."""
        defaults = self.defaults
        if principal.anonymous:
            quota = defaults.anonymous
            return [Bucket("anonymous", "anonymous", "anonymous callers", quota)] if quota.limited else []
        out = []
        if principal.team:
            quota = replace(defaults.team, **dict(principal.team_quota)) if principal.team_quota else defaults.team
            if quota.limited:
                out.append(Bucket(f"team:{principal.team}", "team", f"team {principal.team}", quota))
        elif principal.user and defaults.team.limited:  # no team to charge: the user is a team of one
            who = f"user {principal.user_name or principal.user} (no team of theirs owns this model)"
            out.append(Bucket(f"user:{principal.user}", "user", who, defaults.team))
        if defaults.token.limited:
            out.append(Bucket(f"token:{principal.token}", "token", "this API token", defaults.token))
        return out

    def admit(self, principal: Principal, cost: int = 1) -> Admission:
        """Admit a call by ``principal`` costing ``cost`` requests of its
        rates (and one in-flight slot), or raise RateLimited (counted in
        metrics)."""
        buckets = self.buckets(principal)
        if not buckets:
            return NOTHING
        lease = uuid.uuid4().hex
        if not self.take(principal, buckets, lease, cost, 0, True):
            return NOTHING
        slots = tuple(b.key for b in buckets if b.quota.in_flight > 0)
        rated = tuple(b for b in buckets if b.quota.rate > 0)
        if not slots and not rated:
            return NOTHING
        return Admission(self.store, slots, lease, self, principal, rated, cost)

    def take(
        self, principal: Principal, buckets, lease: str, cost: int, held: int, slots: bool, what: str = ""
    ) -> bool:
        """Take ``cost`` requests (of a call charged ``held`` already) and,
        with ``slots``, in-flight slots from ``buckets``: True, or False when
        the store is away (the call is admitted unchecked); raises
        RateLimited (counted in metrics; ``what`` the call pays for, for its
        message)."""
        try:
            refused, wait, kind = self.store.acquire(list(buckets), lease, cost, held, slots)
        except Exception as exc:  # the shared store is away: serve rather than refuse everyone
            self.store_watch.failed(exc, "admitting requests unchecked meanwhile")
            return False
        self.store_watch.ok()
        if refused is None:
            return True
        team = "anonymous" if principal.anonymous else principal.team
        observability.throttled(team, f"{refused.limit}_{kind}")
        if kind == "rate":
            quota = refused.quota
            costs = f"; {what} costs {cost + held} requests" if what else ""
            message = (
                f"rate limit: {refused.who} may send {quota.rate:g} requests per second "
                f"(bursts of {_burst(quota)}){costs}; retry after {wait:.3f} s"
            )
        else:
            message = f"rate limit: {refused.who} may have {refused.quota.in_flight} inferences in flight"
        raise RateLimited(message, wait)
