"""The log lines of an outage (issue 24): one when a dependency goes away and
one when it is back, however often it is polled meanwhile; a line per
worker joining or leaving the front end's directory; refused requests summed
up in one line per interval (the live outages: tests/workers/test_outages.py)."""

from __future__ import annotations

import logging
import time

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from inference.observability.outage import DependencyWatch, RefusalSummary
from inference.workers import messages
from inference.workers.placement import Worker, WorkerDirectory


def _lines(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records]


def test_one_line_down_and_one_line_back_however_many_polls(caplog):
    caplog.set_level(logging.DEBUG, logger="modelhost.outage")
    watch = DependencyWatch("PostgreSQL")
    watch.ok()  # up: nothing to say
    for attempt in range(50):  # a poll loop meeting the outage 50 times
        watch.failed(ConnectionRefusedError(111, f"Connection refused {attempt}"), "answering from the snapshot")
    watch.ok()
    watch.ok()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert warnings[0] == (
        "PostgreSQL is unreachable: ConnectionRefusedError: [Errno 111] Connection refused 0; answering from the snapshot"
    )
    assert warnings[1].startswith("PostgreSQL recovered after ") and warnings[1].endswith("(50 failed attempt(s))")
    # The traceback of the first failure only at DEBUG.
    assert [r.levelno for r in caplog.records if r.exc_info] == [logging.DEBUG]


def test_refused_requests_are_summed_up_per_interval(caplog):
    caplog.set_level(logging.WARNING, logger="modelhost.outage")
    summary = RefusalSummary(interval=0.2)
    for _ in range(1380):
        summary.record("UNAVAILABLE", "resnet")
    for _ in range(5):
        summary.record("RATE_LIMITED", "iris")
    assert _lines(caplog) == []  # nothing before the interval is over
    time.sleep(0.25)
    summary.tick()
    summary.tick()
    (line,) = _lines(caplog)
    assert line.startswith("refused 1385 request(s) in the last ")
    assert line.endswith(": 1380 UNAVAILABLE (models resnet: 1380); 5 RATE_LIMITED (models iris: 5)"), line


def _worker(worker_id: str, address: str) -> Worker:
    announcement = messages.Announcement("cpu", beat_ms=int(time.time() * 1000), address=address)
    return Worker(worker_id, "infer.cpu", ("127.0.0.1", int(address.rsplit(":", 1)[1])), announcement)


def test_the_front_end_logs_workers_joining_and_leaving(caplog, monkeypatch):
    """A directory over a Redis that nothing listens on: reads fail (one line,
    not one per read), and workers appear and go through the reads it makes."""
    caplog.set_level(logging.INFO, logger="inference.workers.placement")
    reads = iter([{}, {"w-1": _worker("w-1", "10.0.0.5:7070")}, {}])
    monkeypatch.setattr("inference.workers.placement.read_workers", lambda client: next(reads))
    directory = WorkerDirectory(redis.Redis(port=1, socket_connect_timeout=0.1, retry=Retry(NoBackoff(), 0)))
    directory.refresh()  # the first read: nothing joins a directory that just started
    directory.refresh()
    directory._workers["w-1"].announcement.beat_ms = 0  # its last heartbeat expired long ago
    directory.refresh()
    assert _lines(caplog) == [
        "worker w-1 (cpu, 10.0.0.5:7070) joined",
        "worker w-1 (cpu, 10.0.0.5:7070) left: its heartbeat ended (stopped, killed or hung)",
    ]
    monkeypatch.undo()
    caplog.clear()
    for _ in range(3):
        directory.refresh()  # Redis is unreachable
    (line,) = _lines(caplog)
    assert line.startswith("Redis (the workers' heartbeats) is unreachable: ConnectionError: ")
