"""Payload logging (opt-in per model, as KServe's logger): sampled
request/response pairs sent to a sink the operators configure
(``PAYLOAD_LOG_SINK``): a file (JSON lines, appended) or an HTTP endpoint
(one POST per pair, as a CloudEvent in binary mode: ``Ce-*`` headers, the
record as the JSON body).

The request path only decides (one ``random()`` against the model's
``payload_log_rate``) and puts the pair's tensors, by reference, on a
bounded queue: it never serializes, writes or waits. A background thread
encodes and sends. When the queue is full the pair is dropped, and counted
(``modelhost_payload_log_records_total{outcome="dropped"}``); a sink that
fails counts ``failed`` and is retried with the next pair. Tensors are kept
only up to the model's ``payload_log_max_bytes`` (the request's and the
response's together); beyond, the record holds their names, datatypes and
shapes, with ``"truncated": true``.

A record::

    {"id": "<request id>", "time": "2026-...Z", "model": "iris", "version": "2",
     "request": {"inputs": [{"name", "datatype", "shape", "data"}], "parameters": {...}},
     "response": {"outputs": [{"name", "datatype", "shape", "data"}]}, "truncated": false}

BYTES tensors are written as text when they are UTF-8, else as
``{"b64": "..."}``.
"""

from __future__ import annotations

import base64
import datetime
import logging
import os
import queue
import threading
import time
import urllib.request
import uuid

import numpy as np

from inference.codecs.message import dumps
from inference.observability.metrics import PAYLOAD_RECORDS

logger = logging.getLogger(__name__)


def _tensor_data(array: np.ndarray):
    if array.dtype.kind in "OSU":
        out = []
        for item in array.ravel().tolist():
            if isinstance(item, str):
                out.append(item)
                continue
            try:
                out.append(item.decode("utf-8"))
            except UnicodeDecodeError:
                out.append({"b64": base64.b64encode(item).decode("ascii")})
        return out
    return np.ascontiguousarray(array).ravel()


def _nbytes(array) -> int:
    return array.nbytes if isinstance(array, np.ndarray) and array.dtype.kind not in "OSU" else 8 * array.size


class FileSink:
    """Appends JSON lines (``O_APPEND``: processes sharing the file write
    whole lines), the records queued meanwhile in one write; the file is
    opened once per process and again when it was moved away (log rotation)."""

    def __init__(self, path: str):
        self.path = path
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        self._fd = -1
        self._pid = 0
        self._inode = None

    def _open(self) -> int:
        try:
            inode = os.stat(self.path).st_ino
        except FileNotFoundError:
            inode = None
        if self._fd < 0 or self._pid != os.getpid() or inode != self._inode:
            if self._fd >= 0 and self._pid == os.getpid():
                os.close(self._fd)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
            self._pid, self._inode = os.getpid(), os.fstat(self._fd).st_ino
        return self._fd

    def send_many(self, records: list[bytes]) -> None:
        data = b"\n".join(records) + b"\n"
        fd = self._open()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    def send(self, record: bytes) -> None:
        self.send_many([record])


class HttpSink:
    """POSTs each record as a binary-mode CloudEvent."""

    def __init__(self, url: str, timeout: float = 5.0):
        self.url = url
        self.timeout = timeout

    def send_many(self, records: list[bytes]) -> None:
        for record in records:
            self.send(record)

    def send(self, record: bytes) -> None:
        request = urllib.request.Request(
            self.url,
            data=record,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "Ce-Specversion": "1.0",
                "Ce-Id": uuid.uuid4().hex,
                "Ce-Type": "modelhost.inference.pair",
                "Ce-Source": "modelhost",
            },
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            response.read()


def sink_for(target: str):
    """The sink of ``PAYLOAD_LOG_SINK``: an http(s) URL or a file path; None when empty."""
    if not target:
        return None
    if target.startswith(("http://", "https://")):
        return HttpSink(target)
    return FileSink(target)


class PayloadLogger:
    """Queues sampled pairs and writes them from one background thread
    (started on the first pair, so that each server process, after a fork,
    has its own)."""

    def __init__(self, sink, capacity: int = 1000):
        self.sink = sink
        self._queue: queue.Queue = queue.Queue(capacity)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, entry, request, outputs, max_bytes: int) -> None:
        """Queue one pair (never blocks; dropped and counted when the queue is full)."""
        if self._thread is None:
            self._start()
        size = sum(_nbytes(t.data) for t in request.inputs) + sum(_nbytes(o.data) for o in outputs)
        keep = size <= max_bytes
        item = (
            entry.model_name, entry.number, request.id, request.parameters,
            [(t.name, t.datatype, t.shape, t.data if keep else None) for t in request.inputs],
            [(o.name, o.datatype, o.shape, o.data if keep else None) for o in outputs],
            not keep, time.time(),
        )  # fmt: skip
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            PAYLOAD_RECORDS.labels("dropped").inc()

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._drain, name="payload-log", daemon=True)
                self._thread.start()

    @staticmethod
    def encode(item) -> bytes:
        model, version, request_id, parameters, inputs, outputs, truncated, when = item

        def tensors(items):
            out = []
            for name, datatype, shape, data in items:
                tensor = {"name": name, "datatype": datatype, "shape": list(shape)}
                if data is not None:
                    tensor["data"] = _tensor_data(data)
                out.append(tensor)
            return out

        params = {k: v for k, v in (parameters or {}).items() if isinstance(v, (str, int, float, bool))}
        return dumps(
            {
                "id": request_id or "",
                "time": datetime.datetime.fromtimestamp(when, datetime.UTC).isoformat().replace("+00:00", "Z"),
                "model": model,
                "version": str(version),
                "request": {"inputs": tensors(inputs), "parameters": params},
                "response": {"outputs": tensors(outputs)},
                "truncated": truncated,
            }
        )

    def _drain(self) -> None:
        """Take what is queued (waiting for the first), encode, send in one go."""
        while True:
            items = [self._queue.get()]
            while len(items) < 256:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self.sink.send_many([self.encode(item) for item in items])
                PAYLOAD_RECORDS.labels("written").inc(len(items))
            except Exception:
                PAYLOAD_RECORDS.labels("failed").inc(len(items))
                logger.exception("payload log: sending %d record(s) failed", len(items))
            finally:
                for _ in items:
                    self._queue.task_done()
            time.sleep(0.005)  # let records gather: fewer, larger writes, less GIL taken from requests

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every queued pair is handled (tests, shutdown)."""
        done = threading.Event()
        threading.Thread(target=lambda: (self._queue.join(), done.set()), daemon=True).start()
        return done.wait(timeout)
