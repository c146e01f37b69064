"""Devices, their Celery queues, worker heartbeats and model placement.

A device is ``cpu`` or ``cuda:<n>``; its queue is ``infer.cpu`` or
``infer.cuda<n>``. A worker pinned to a device (``manage.py runworker
--device``) consumes only that queue and keeps a Redis key
``modelhost:worker:<queue>:<worker id>`` alive (a heartbeat with a short
expiry) whose value gives the address where it accepts front-end
connections. The front end reads those keys to know which workers are live,
and sends each request to a worker of a device that the model's instance
group allows (round robin). A worker told to stop marks its heartbeat
``draining``: front ends drop it at the next read (it still answers what it
holds), and its key goes once it has drained
(:mod:`inference.workers.server.heartbeat`).

Instance groups (read in :mod:`inference.serving.instance_groups`) follow Triton:
``KIND_GPU`` with ``gpus: [0, 1]`` -> cuda:0, cuda:1 (no gpus: any GPU);
``KIND_CPU`` -> cpu; ``KIND_AUTO`` or no group -> the live GPUs when there
are any, else the CPU (never both, as Triton's KIND_AUTO). GPU numbers are per host: ``gpus: [0]`` is the
queue ``infer.cuda0``, which every host's ``cuda:0`` worker serves; a host
without a GPU 0 runs no such worker and is never picked.

The directory also exports what autoscaling needs: the depth (requests
held) per queue and per worker pool, each worker's busy fraction
(``/metrics``), and, when asked, Redis lists whose length is a depth, for
KEDA's Redis scaler (:meth:`WorkerDirectory._publish_depth`).
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import threading
import time
from dataclasses import dataclass

from inference.observability import metrics as observability
from inference.observability.metrics import QUEUE_DEPTH
from inference.observability.outage import DependencyWatch
from inference.runtime import onnx as onnx_runtime
from inference.serving import instance_groups
from inference.workers import messages

logger = logging.getLogger(__name__)

_DEVICE = re.compile(r"^(cpu|cuda:(\d+))$")
HEARTBEAT_PREFIX = "modelhost:worker:"
HEARTBEAT_SECONDS = 1.0
HEARTBEAT_TTL_MS = 5000  # tolerant of a busy machine; a dead worker is noticed within ~5 s
#: KEDA's Redis scaler reads the length of this list per queue (see WorkerDirectory._publish_depth).
DEPTH_PREFIX = "modelhost:queue-depth:"
POOL_DEPTH_PREFIX = "modelhost:pool-depth:"
DEPTH_LOCK_KEY = "modelhost:queue-depth-writer"
DEPTH_TTL_MS = 5000
DEPTH_LIST_CAP = 10_000


class DeviceError(ValueError):
    """A device name other than ``cpu`` or ``cuda:<n>``."""


def parse_device(name: str) -> tuple[str, int | None]:
    """("cpu", None) or ("cuda", n); raises DeviceError."""
    match = _DEVICE.match(name.strip().lower())
    if match is None:
        raise DeviceError(f"unknown device {name!r}: use 'cpu' or 'cuda:<n>' (e.g. cuda:0)")
    return ("cpu", None) if match.group(1) == "cpu" else ("cuda", int(match.group(2)))


class DeviceUnavailable(RuntimeError):
    """The device's execution provider is missing and CPU fallback is off."""


def providers_for(device: str, fallback_to_cpu: bool = False) -> list:
    """Execution providers for a device; raises DeviceError / DeviceUnavailable."""
    kind, index = parse_device(device)
    if kind == "cpu":
        return onnx_runtime.provider_list(["CPUExecutionProvider"])
    try:
        return onnx_runtime.provider_list(["CUDAExecutionProvider", "CPUExecutionProvider"], device_id=index)
    except onnx_runtime.ProviderError as exc:
        if not fallback_to_cpu:
            raise DeviceUnavailable(f"{device}: {exc}; install onnxruntime-gpu, or set WORKER_CPU_FALLBACK") from None
        logger.warning("%s: %s; falling back to the CPU (WORKER_CPU_FALLBACK)", device, exc)
        return onnx_runtime.provider_list(["CPUExecutionProvider"])


def device_name(device: str) -> str:
    """A device's canonical name (``cpu``, ``cuda:<n>``); raises DeviceError."""
    kind, index = parse_device(device)
    return instance_groups.CPU_DEVICE if kind == "cpu" else instance_groups.gpu_device(index)


def queue_for(device: str) -> str:
    """The queue (heartbeat and depth key part) of a device: ``infer.cpu``, ``infer.cuda<n>``."""
    kind, index = parse_device(device)
    return "infer.cpu" if kind == "cpu" else f"infer.cuda{index}"


def device_of(queue: str) -> str:
    """The device a queue name stands for (the inverse of :func:`queue_for`)."""
    name = queue.removeprefix("infer.")
    return name if name == "cpu" else name.replace("cuda", "cuda:", 1)


def heartbeat_key(queue: str, worker_id: str) -> str:
    return f"{HEARTBEAT_PREFIX}{queue}:{worker_id}"


def depth_key(queue: str) -> str:
    """The Redis list whose length is ``queue``'s depth (for KEDA's Redis scaler)."""
    return f"{DEPTH_PREFIX}{queue}"


def pool_depth_key(pool: str) -> str:
    """The Redis list whose length is the depth of the workers of ``pool``
    (WORKER_POOL, e.g. one Kubernetes Deployment per GPU kind)."""
    return f"{POOL_DEPTH_PREFIX}{pool}"


@dataclass(frozen=True)
class Worker:
    """A live inference worker as its heartbeat announces it (untrusted:
    the worker proves itself when a front end connects)."""

    id: str  # <hostname>-<pid>
    queue: str  # infer.cpu, infer.cuda0, ...
    address: tuple[str, int] | None  # its TLS listener, if it has one
    announcement: messages.Announcement


def _address(text: str) -> tuple[str, int] | None:
    if not text:
        return None
    host, port = text.rsplit(":", 1)
    return host.strip("[]"), int(port)


def read_workers(redis_client) -> dict[str, Worker]:
    """The live workers by id, from their heartbeat keys (one SCAN, one
    MGET); malformed heartbeats are skipped. Raises redis errors."""
    keys = list(redis_client.scan_iter(match=f"{HEARTBEAT_PREFIX}*", count=1000))
    values = redis_client.mget(keys) if keys else []
    workers = {}
    for key, value in zip(keys, values):
        if value is None:
            continue  # expired between SCAN and MGET
        queue, _, worker_id = key.decode()[len(HEARTBEAT_PREFIX) :].partition(":")
        try:
            announced = messages.announcement_json.decode(value)
            workers[worker_id] = Worker(worker_id, queue, _address(announced.address), announced)
        except (ValueError, messages.DecodeError):
            logger.warning("ignoring a malformed worker heartbeat %s", key)
    return workers


#: The least time between two reads of the heartbeats for requests that found no worker
#: (:meth:`WorkerDirectory.catch_up`).
CATCH_UP_SECONDS = 0.05


class WorkerDirectory:
    """The front end's view of the live workers, refreshed by a daemon thread
    from their heartbeats (a SCAN and an MGET every ``interval`` seconds).
    Reading it is free. While Redis is unreachable the last view stays
    (requests keep going over the workers' connections, which tell by
    closing when a worker dies); only heartbeat expiry cannot be seen then.
    A worker whose heartbeat says ``draining``, or that said so over a
    connection (:meth:`drop`), gets no new request at once; it stays live
    (:meth:`is_live`) for the requests it holds until its key goes."""

    def __init__(self, redis_client, interval: float = 0.5, publish_depth: bool = False):
        self.redis = redis_client
        self.interval = interval
        self.publish_depth = publish_depth
        self._token = os.urandom(8).hex().encode()
        self._depths: dict[str, int] = {}
        self._pool_depths: dict[str, int] = {}
        self._published: set[str] = set()
        self._workers: dict[str, Worker] = {}
        self._draining: frozenset[str] = frozenset()  # ids whose heartbeat says draining
        self._dropped: dict[str, float] = {}  # worker id -> until when (monotonic): it said it drains
        self._lock = threading.Lock()  # refresh and drop
        self._seen_once = False
        self._grace_until_ms = 0.0  # after an outage of Redis: known workers stay until then
        self._by_queue: dict[str, tuple[Worker, ...]] = {}
        self.error: str = ""
        self._round_robin: dict[tuple, itertools.count] = {}
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._refreshed = float("-inf")  # time.monotonic() of the last read from Redis
        self._catch_up = threading.Lock()
        self._caught_up = float("-inf")  # time.monotonic() of the last read for a miss
        self.redis_watch = DependencyWatch("Redis (the workers' heartbeats)", logger)

    def refresh(self) -> None:
        self._refreshed = time.monotonic()
        try:
            workers = read_workers(self.redis)
        except Exception as exc:
            self.error = f"Redis is unreachable: {exc}"
            self.redis_watch.failed(exc, f"requests go to the {len(self._workers)} worker(s) known before")
            return
        now_ms = time.time() * 1000
        if self.redis_watch.down:  # back from an outage: no worker could beat meanwhile
            self._grace_until_ms = now_ms + HEARTBEAT_TTL_MS
        self.redis_watch.ok()
        draining = frozenset(i for i, w in workers.items() if w.announcement.draining)
        with self._lock:
            now = time.monotonic()
            self._dropped = {i: until for i, until in self._dropped.items() if until > now}
            # A worker missing from this read whose last heartbeat has not expired yet (Redis restarted
            # empty, or lost the key) stays until it would have: its next beat comes within a second.
            # After an outage of Redis, every known worker stays one heartbeat expiry for its next beat.
            # A draining worker (marked so, or it said so) is dropped at once and never kept.
            for worker_id, worker in self._workers.items():
                if worker_id not in workers and (
                    worker.announcement.beat_ms + HEARTBEAT_TTL_MS > now_ms or now_ms < self._grace_until_ms
                ):
                    workers[worker_id] = worker
            workers = {i: w for i, w in workers.items() if i not in draining and i not in self._dropped}
            by_queue: dict[str, list[Worker]] = {}
            for worker in sorted(workers.values(), key=lambda w: w.id):
                by_queue.setdefault(worker.queue, []).append(worker)
            if self._seen_once:
                _log_changes(self._workers, workers, draining | self._dropped.keys())
            self._seen_once = True
            self._workers = workers
            self._draining = draining
            self._by_queue = {q: tuple(ws) for q, ws in by_queue.items()}
        self.error = ""
        for queue in set(self._depths) - set(by_queue):
            QUEUE_DEPTH.labels(queue).set(0)
        self._depths = {q: sum(w.announcement.busy for w in members) for q, members in by_queue.items()}
        for queue, depth in self._depths.items():
            QUEUE_DEPTH.labels(queue).set(depth)
        pools: dict[str, int] = {}
        for worker in workers.values():
            pool = worker.announcement.pool
            if pool:
                pools[pool] = pools.get(pool, 0) + worker.announcement.busy
        self._pool_depths = pools
        if self.publish_depth:
            self._publish_depth()

    def _publish_depth(self) -> None:
        """Keep ``modelhost:queue-depth:<queue>`` and ``modelhost:pool-depth:<pool>``
        (Redis lists whose length is the depth of a queue's or a pool's
        workers, for KEDA's Redis scaler, which reads LLEN) current: one
        front-end process at a time writes (a short lock), the others only
        try the lock. A list expires when nobody refreshes it."""
        try:
            owner = self.redis.set(DEPTH_LOCK_KEY, self._token, nx=True, px=DEPTH_TTL_MS)
            if not owner and self.redis.get(DEPTH_LOCK_KEY) != self._token:
                return
            pipe = self.redis.pipeline(transaction=True)
            pipe.pexpire(DEPTH_LOCK_KEY, DEPTH_TTL_MS)
            lists = {depth_key(q): d for q, d in self._depths.items()}
            lists.update({pool_depth_key(p): d for p, d in self._pool_depths.items()})
            for key in self._published - set(lists):  # a queue or pool without live workers now
                pipe.delete(key)
            self._published = set(lists)
            for key, depth in lists.items():
                pipe.delete(key)
                if depth > 0:
                    pipe.rpush(key, *([1] * min(depth, DEPTH_LIST_CAP)))
                    pipe.pexpire(key, DEPTH_TTL_MS)
            pipe.execute()
        except Exception:
            logger.debug("publishing queue depths to Redis failed", exc_info=True)

    def catch_up(self, missed_at: float) -> None:
        """Read the heartbeats again for a request that found no live worker
        for its devices at ``missed_at`` (``time.monotonic()``): a worker may
        have started since the last read. Nothing to do when a read started
        after the miss; misses waiting meanwhile share the read; while
        misses keep coming (a device without workers), at most one such
        read per ``CATCH_UP_SECONDS``. Blocks on Redis: call it from a
        thread, not an event loop."""
        if self._refreshed >= missed_at:
            return
        with self._catch_up:
            now = time.monotonic()
            if self._refreshed >= missed_at or now - self._caught_up < CATCH_UP_SECONDS:
                return
            self._caught_up = now
            self.refresh()

    def start(self) -> None:
        """Read the heartbeats now and keep refreshing every ``interval`` in a
        daemon thread (again after :meth:`stop`)."""
        self.refresh()
        observability.watch_workers(self.workers)  # /metrics: each live worker's busy fraction
        if self._thread is None:
            self._stopping = threading.Event()  # a fresh one: a thread that stop() missed keeps its own, set
            self._thread = threading.Thread(target=self._run, args=(self._stopping,), name="worker-directory",
                                            daemon=True)  # fmt: skip
            self._thread.start()

    def stop(self) -> None:
        """End the refreshing thread (within ``interval``); the last view stays readable."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 5.0)
            self._thread = None

    def _run(self, stopping: threading.Event) -> None:
        while not stopping.wait(self.interval):
            self.refresh()

    def live_devices(self) -> frozenset[str]:
        """Devices (``cpu``, ``cuda:<n>``) with at least one live worker."""
        return frozenset(device_of(q) for q in self._by_queue)

    def workers(self) -> list[Worker]:
        return list(self._workers.values())

    def is_live(self, worker_id: str) -> bool:
        """Whether the worker's heartbeat is current, draining or not (True
        while Redis cannot tell): a request it holds may still be answered."""
        return (
            bool(self.error)
            or worker_id in self._workers
            or worker_id in self._draining
            or (worker_id in self._dropped)
        )

    def accepts(self, worker_id: str) -> bool:
        """Whether the worker takes new requests (live and not draining)."""
        return worker_id in self._workers

    def drop(self, worker_id: str) -> None:
        """The worker said it is draining: no new request goes to it from now
        on (its heartbeat may not say so yet); it stays live for what it holds."""
        with self._lock:
            self._dropped[worker_id] = time.monotonic() + 2 * HEARTBEAT_TTL_MS / 1000
            worker = self._workers.get(worker_id)
            if worker is None:
                return
            self._workers = {i: w for i, w in self._workers.items() if i != worker_id}
            members = tuple(w for w in self._by_queue.get(worker.queue, ()) if w.id != worker_id)
            self._by_queue = {**{q: ws for q, ws in self._by_queue.items() if q != worker.queue},
                              **({worker.queue: members} if members else {})}  # fmt: skip
        logger.info("worker %s is draining: no new request goes to it", describe_worker(worker))

    def candidates(self, instance_group) -> list[Worker]:
        """Live workers of the devices the instance group allows, in device order."""
        by_device = {device_of(q): workers for q, workers in self._by_queue.items()}
        return [w for d in instance_groups.allowed_devices(instance_group, set(by_device)) for w in by_device[d]]

    def pick(self, key, workers: list[Worker]) -> Worker:
        """Round robin over ``workers`` (per model version)."""
        counter = self._round_robin.get(key)
        if counter is None:
            counter = self._round_robin[key] = itertools.count()
        return workers[next(counter) % len(workers)]


def describe_worker(worker: Worker) -> str:
    """``<id> (<device>, <address or unix socket>)`` for the log."""
    a = worker.announcement
    where = a.address or a.unix or "no address"
    return f"{worker.id} ({a.device}, {where})"


def _log_changes(before: dict[str, Worker], after: dict[str, Worker], draining) -> None:
    """One line per worker that joined or left between two reads of the heartbeats."""
    for worker_id in sorted(after.keys() - before.keys()):
        logger.info("worker %s joined", describe_worker(after[worker_id]))
    for worker_id in sorted(before.keys() - after.keys()):
        if worker_id in draining:
            logger.info("worker %s is draining: no new request goes to it", describe_worker(before[worker_id]))
        else:
            logger.warning(
                "worker %s left: its heartbeat ended (stopped, killed or hung)", describe_worker(before[worker_id])
            )
