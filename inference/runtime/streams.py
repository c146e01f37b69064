"""Worker transport (b), Redis Streams, kept for measurement against the
direct connections of :mod:`inference.runtime.remote` (docs/worker-transport.md).

``WORKER_TRANSPORT=streams``: the front end XADDs each request (one frame of
:mod:`inference.runtime.frames`, raw tensor bytes) to the device's stream
``modelhost:stream:<queue>``; workers read it with a consumer group
(XREADGROUP), answer on a per-request list (LPUSH, read with BLPOP) and
XACK; a worker takes over entries another consumer left pending for 5 s
(XAUTOCLAIM). Faults: no live worker -> UNAVAILABLE; no answer before the
deadline -> DEADLINE_EXCEEDED; the device's last worker gone -> UNAVAILABLE.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid

import msgpack
import numpy as np

from inference.protocol import errors
from inference.runtime import frames
from inference.runtime.execution import RunResult, RunTarget
from inference.runtime.placement import WorkerDirectory, describe_group

logger = logging.getLogger(__name__)

STREAM_PREFIX = "modelhost:stream:"
REPLY_PREFIX = "modelhost:reply:"
GROUP = "workers"
_POLL = 0.25


def parse(data: bytes) -> tuple[dict, memoryview]:
    """A frame held in one bytes object: (header, body)."""
    view = memoryview(data)
    _, header_length = frames.PREFIX.unpack_from(view)
    header = msgpack.unpackb(view[frames.PREFIX.size : frames.PREFIX.size + header_length], raw=False)
    return header, view


class StreamsExecutor:
    """Front-end side of transport (b); the same interface as RemoteExecutor."""

    def __init__(self, directory: WorkerDirectory, redis_client, default_timeout: float = 30.0):
        self.directory = directory
        self.redis = redis_client
        self.default_timeout = default_timeout

    def start(self) -> None:
        self.directory.start()

    def on_snapshot(self, snapshot) -> None:
        """Sessions live in the workers."""

    def blocks(self, target: RunTarget) -> bool:
        return True

    def run(
        self, target: RunTarget, feeds: dict[str, np.ndarray], output_names: list[str], rows: int = 1,
        deadline: float | None = None, placement=(),
    ) -> RunResult:  # fmt: skip
        if deadline is None:
            deadline = time.monotonic() + self.default_timeout
        workers = self.directory.candidates(placement)
        if not workers:
            raise errors.ModelNotReady(
                f"model '{target.model}' cannot run now: no live worker serves {describe_group(placement)}"
            )
        queue = self.directory.pick(target.key, workers).queue
        reply = REPLY_PREFIX + uuid.uuid4().hex
        header = {
            "model": target.model, "version": target.version, "sha256": target.sha256, "outputs": output_names,
            "rows": rows, "deadline": time.time() + (deadline - time.monotonic()), "reply": reply,
        }  # fmt: skip
        data = b"".join(bytes(b) for b in frames.encode(header, feeds.items()))
        self.redis.xadd(STREAM_PREFIX + queue, {"f": data}, maxlen=100_000, approximate=True)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise errors.DeadlineExceeded(f"no answer from the {queue} workers before the request's deadline")
            item = self.redis.blpop([reply], timeout=min(_POLL, remaining))
            if item is not None:
                break
            if queue not in self.directory.live_queues():
                raise errors.ModelNotReady(f"the {queue} workers stopped before answering")
        answer, body = parse(item[1])
        if answer.get("error"):
            raise errors.from_code(*answer["error"])
        outputs = frames.tensors(answer, body, "worker answer")
        return RunResult(
            [outputs[n] for n in output_names], answer["batch"], answer["executed"], answer["queue_ns"],
            answer["infer_ns"],
        )  # fmt: skip


def serve(redis_client, queue: str, consumer: str, handle, threads: int = 4) -> None:
    """Worker side: ``threads`` daemon threads consume the device's stream."""
    stream = STREAM_PREFIX + queue
    try:
        redis_client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    except Exception:  # the group exists
        pass

    def answer(entry_id, fields) -> None:
        header, body = parse(fields[b"f"])
        buffers = handle(header, body)
        pipe = redis_client.pipeline(transaction=False)
        pipe.lpush(header["reply"], b"".join(bytes(b) for b in buffers))
        pipe.expire(header["reply"], 60)
        pipe.xack(stream, GROUP, entry_id)
        pipe.execute()

    def loop() -> None:
        while True:
            try:
                entries = redis_client.xreadgroup(GROUP, consumer, {stream: ">"}, count=1, block=1000)
                for _, items in entries or ():
                    for entry_id, fields in items:
                        answer(entry_id, fields)
            except Exception:  # the group exists
                logger.exception("stream consumer failed; retrying")
                time.sleep(0.5)

    def reclaim() -> None:
        while True:
            time.sleep(2.0)
            try:
                _, items, *_ = redis_client.xautoclaim(stream, GROUP, consumer, min_idle_time=5000, count=16)
                for entry_id, fields in items:
                    if fields:
                        answer(entry_id, fields)
            except Exception:  # the group exists
                logger.exception("reclaiming pending entries failed")

    for index in range(threads):
        threading.Thread(target=loop, name=f"stream-{index}", daemon=True).start()
    threading.Thread(target=reclaim, name="stream-reclaim", daemon=True).start()
