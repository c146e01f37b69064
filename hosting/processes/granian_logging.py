"""granian's log configuration for ``manage.py serve`` (its ``--log-config``).

granian warns at start whenever a WSGI server may spawn more Python threads
than twice the CPU cores ("Configuration allows spawning up to 36 Python
threads, which seems quite high ..."). Here that maximum is
``HTTP_THREADS + HTTP_BODY_THREADS`` per process by design: the threads are
spawned on demand, and the body gate (:mod:`hosting.body_gate`) lets only
``HTTP_THREADS`` of them run the application at once; the others only wait
for request bodies that trickle in. The concurrency granian asks to bound is
bounded, so ``serve`` drops that one warning (:class:`ThreadCountFilter`) and
logs the real layout itself; every other granian line is kept as granian
writes it.
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

#: The start of granian's (2.8) warning about its maximum thread count.
THREAD_WARNING = "Configuration allows spawning up to"


class ThreadCountFilter(logging.Filter):
    """Drops granian's thread-count warning (see the module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(THREAD_WARNING)


def config() -> dict:
    """granian's own logging configuration (``granian.log.LOGGING_CONFIG``:
    formatters, handlers, loggers) with :class:`ThreadCountFilter` on its
    console handler. granian merges a given configuration at the top level,
    so this is the whole of it."""
    from granian.log import LOGGING_CONFIG

    settings = copy.deepcopy(LOGGING_CONFIG)
    settings["filters"] = {"thread_count": {"()": f"{__name__}.{ThreadCountFilter.__name__}"}}
    settings["handlers"]["console"]["filters"] = ["thread_count"]
    return settings


def write(path: Path) -> Path:
    """Write :func:`config` as JSON to ``path`` (for ``--log-config``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config(), indent=1))
    return path
