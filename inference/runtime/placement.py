"""Devices, their Celery queues, worker heartbeats and model placement.

A device is ``cpu`` or ``cuda:<n>``; its queue is ``infer.cpu`` or
``infer.cuda<n>``. A worker pinned to a device (``manage.py runworker
--device``) consumes only that queue and keeps a Redis key
``modelhost:worker:<queue>:<hostname>`` alive (a heartbeat with a short
expiry). The front end reads those keys to know which queues have a live
worker, and places each request on a queue of a device that the model's
instance group allows (round robin).

Instance groups follow Triton: ``KIND_GPU`` with ``gpus: [0, 1]`` -> cuda:0,
cuda:1 (no gpus: any GPU); ``KIND_CPU`` -> cpu; ``KIND_AUTO`` or no group ->
any live device, GPUs first.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time

logger = logging.getLogger(__name__)

_DEVICE = re.compile(r"^(cpu|cuda:(\d+))$")
HEARTBEAT_PREFIX = "modelhost:worker:"
HEARTBEAT_SECONDS = 1.0
HEARTBEAT_TTL_MS = 5000  # tolerant of a busy machine; a dead worker is noticed within ~5 s


class DeviceError(ValueError):
    """A device name other than ``cpu`` or ``cuda:<n>``."""


def parse_device(name: str) -> tuple[str, int | None]:
    """("cpu", None) or ("cuda", n); raises DeviceError."""
    match = _DEVICE.match(name.strip().lower())
    if match is None:
        raise DeviceError(f"unknown device {name!r}: use 'cpu' or 'cuda:<n>' (e.g. cuda:0)")
    return ("cpu", None) if match.group(1) == "cpu" else ("cuda", int(match.group(2)))


def queue_for(device: str) -> str:
    kind, index = parse_device(device)
    return "infer.cpu" if kind == "cpu" else f"infer.cuda{index}"


def heartbeat_key(queue: str, hostname: str) -> str:
    return f"{HEARTBEAT_PREFIX}{queue}:{hostname}"


def allowed_queues(instance_group, live: set[str]) -> list[str]:
    """The live queues a model with ``instance_group`` may run on, in order."""
    gpus = sorted(q for q in live if q.startswith("infer.cuda"))
    cpu = ["infer.cpu"] if "infer.cpu" in live else []
    if not instance_group:
        return gpus + cpu
    out: list[str] = []
    for group in instance_group:
        kind = group.get("kind", "KIND_AUTO")
        if kind == "KIND_GPU":
            wanted = [f"infer.cuda{g}" for g in group.get("gpus") or []] or gpus
            out += [q for q in wanted if q in live]
        elif kind == "KIND_CPU":
            out += cpu
        else:
            out += gpus + cpu
    return list(dict.fromkeys(out))


def describe_group(instance_group) -> str:
    if not instance_group:
        return "any device"
    parts = []
    for group in instance_group:
        kind = group.get("kind", "KIND_AUTO")
        if kind == "KIND_GPU":
            parts.append(", ".join(f"cuda:{g}" for g in group.get("gpus") or []) or "any GPU")
        elif kind == "KIND_CPU":
            parts.append("cpu")
        else:
            parts.append("any device")
    return "; ".join(parts)


class Heartbeat:
    """Keeps this worker's heartbeat key alive from a daemon thread."""

    def __init__(self, redis_client, queue: str, hostname: str):
        self.redis = redis_client
        self.key = heartbeat_key(queue, hostname)
        self._stop = threading.Event()

    def beat(self) -> None:
        self.redis.set(self.key, str(time.time()), px=HEARTBEAT_TTL_MS)

    def start(self) -> None:
        self.beat()
        threading.Thread(target=self._run, name="heartbeat", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        try:
            self.redis.delete(self.key)
        except Exception:
            pass

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            try:
                self.beat()
            except Exception:
                logger.warning("heartbeat to Redis failed; retrying")


class LiveQueues:
    """The front end's view of which queues have a live worker, refreshed by a
    daemon thread; also reports each queue's depth. ``snapshot()`` is free."""

    def __init__(self, redis_client, interval: float = 0.5, stale_after: float = 10.0):
        self.redis = redis_client
        self.interval = interval
        self.stale_after = stale_after
        self._live: frozenset[str] = frozenset()
        self._refreshed = 0.0
        self.error: str = ""
        self._round_robin: dict[tuple, itertools.cycle] = {}
        self._thread: threading.Thread | None = None

    def refresh(self) -> None:
        try:
            keys = list(self.redis.scan_iter(match=f"{HEARTBEAT_PREFIX}*", count=500))
            live = frozenset(k.decode()[len(HEARTBEAT_PREFIX) :].rsplit(":", 1)[0] for k in keys)
            self._live, self._refreshed, self.error = live, time.monotonic(), ""
            from inference.observability import QUEUE_DEPTH

            for queue in live:
                QUEUE_DEPTH.labels(queue).set(self.redis.llen(queue))
        except Exception as exc:
            self.error = f"Redis is unreachable: {exc}"

    def start(self) -> None:
        self.refresh()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="live-queues", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(self.interval)
            self.refresh()

    def snapshot(self) -> frozenset[str]:
        """Live queues; empty when the last good refresh is too old (Redis down)."""
        if time.monotonic() - self._refreshed > self.stale_after:
            return frozenset()
        return self._live

    def pick(self, key, queues: list[str]) -> str:
        """Round robin over ``queues`` (per model version)."""
        cycle_key = (key, tuple(queues))
        cycle = self._round_robin.get(cycle_key)
        if cycle is None:
            cycle = self._round_robin[cycle_key] = itertools.cycle(queues)
        return next(cycle)
