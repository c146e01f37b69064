"""Log lines an operator can use during an outage.

:class:`DependencyWatch`: one WARNING line when a dependency (PostgreSQL,
Redis, the storage backend) stops answering and one when it answers again
("... recovered after 12.3 s, 12 failed attempts"), however often a poll
loop touches it meanwhile; the traceback of the first failure only at DEBUG.

:class:`RefusalSummary`: requests answered with an error, counted by status
code and model, and logged as one line per ``interval`` seconds at most
("refused 1385 requests in the last 10 s: 1380 UNAVAILABLE (model resnet),
5 RATE_LIMITED (model iris)"), never one line per request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

logger = logging.getLogger("modelhost.outage")


class DependencyWatch:
    """The state of one dependency (``name``, e.g. "PostgreSQL (the model
    registry)") as the calls of one poll loop see it. Thread-safe.
    ``failed(exc, consequence)`` after a failed call, ``ok()`` after a
    successful one; each logs only on a change of state."""

    def __init__(self, name: str, log: logging.Logger | None = None):
        self.name = name
        self.log = log or logger
        self.down_since: float | None = None  # time.monotonic() of the first failure
        self.failures = 0
        self._lock = threading.Lock()

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def failed(self, exc: BaseException, consequence: str = "") -> None:
        with self._lock:
            self.failures += 1
            if self.down_since is not None:
                return
            self.down_since = time.monotonic()
        then = f"; {consequence}" if consequence else ""
        self.log.warning("%s is unreachable: %s: %s%s", self.name, type(exc).__name__, _first_line(exc), then)
        self.log.debug("%s: the first failure", self.name, exc_info=exc)

    def ok(self) -> None:
        if self.down_since is None:  # the common case: no lock
            return
        with self._lock:
            since, failures = self.down_since, self.failures
            if since is None:
                return
            self.down_since, self.failures = None, 0
        self.log.warning(
            "%s recovered after %.1f s (%d failed attempt(s))", self.name, time.monotonic() - since, failures
        )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else "(no message)"


class RefusalSummary:
    """Counts refused requests (``record(code, model)``; ``code``: the
    error's category, e.g. ``UNAVAILABLE``) and logs what it counted as one
    WARNING line at most every ``interval`` seconds, from the call that
    finds the interval over, or from :meth:`tick`. ``flush()`` logs what is pending."""

    def __init__(self, interval: float = 10.0, log: logging.Logger | None = None):
        self.interval = interval
        self.log = log or logger
        self._counts: Counter = Counter()
        self._started = time.monotonic()
        self._lock = threading.Lock()

    def record(self, code: str, model: str = "") -> None:
        now = time.monotonic()
        with self._lock:
            self._counts[(code, model)] += 1
            if now - self._started < self.interval:
                return
            counts, started = self._take(now)
        self._write(counts, now - started)

    def flush(self) -> None:
        now = time.monotonic()
        with self._lock:
            counts, started = self._take(now)
        self._write(counts, now - started)

    def tick(self) -> None:
        """Log what is pending once the interval is over (a poll loop calls it,
        so the last refusals of a burst are logged too)."""
        if self._counts and time.monotonic() - self._started >= self.interval:
            self.flush()

    def _take(self, now: float) -> tuple[Counter, float]:
        counts, started = self._counts, self._started
        self._counts, self._started = Counter(), now
        return counts, started

    def _write(self, counts: Counter, seconds: float) -> None:
        if not counts:
            return
        by_code: dict[str, Counter] = {}
        for (code, model), n in counts.items():
            by_code.setdefault(code, Counter())[model] += n
        parts = []
        for code, models in sorted(by_code.items(), key=lambda item: -sum(item[1].values())):
            named = ", ".join(f"{m or '-'}: {n}" for m, n in models.most_common(3))
            more = f", +{len(models) - 3} more" if len(models) > 3 else ""
            parts.append(f"{sum(models.values())} {code} (models {named}{more})")
        self.log.warning(
            "refused %d request(s) in the last %.0f s: %s", sum(counts.values()), seconds, "; ".join(parts)
        )


#: This process's summary of refused inference requests (every transport).
REFUSALS = RefusalSummary()
