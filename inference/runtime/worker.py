"""The inference worker: what runs inside ``manage.py runworker --device D``.

One process per device; Celery's thread pool runs ``WORKER_CONCURRENCY``
inferences at a time on it. Sessions are created with the device's
execution provider (CUDA with ``device_id`` for ``cuda:<n>``), kept in an LRU
cache under ``WORKER_MEMORY_BUDGET_MB`` (estimated from artifact sizes), and
dropped when their version stops serving (the worker follows the registry's
change stamp like every server process). Artifacts are copied from the model
store into ``WORKER_CACHE_DIR/<sha256>/`` once per machine.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from inference.protocol.errors import DeadlineExceeded, InferenceError, ModelNotReady
from inference.runtime import onnx as onnx_runtime
from inference.runtime import wire
from inference.runtime.deadlines import watchdog
from inference.runtime.placement import parse_device

logger = logging.getLogger(__name__)


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


@dataclass
class _Loaded:
    model: onnx_runtime.OnnxModel
    cost: int


class LRUSessions:
    """Sessions keyed by (model, version, sha256), least recently used first
    out when a new one would exceed ``budget`` bytes (estimated as
    ``factor`` x artifact size). The session being loaded always fits."""

    def __init__(self, loader, budget: int, factor: float = 2.0):
        self.loader = loader
        self.budget = budget
        self.factor = factor
        self._items: OrderedDict[tuple, _Loaded] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[tuple, threading.Lock] = {}

    @property
    def used(self) -> int:
        return sum(item.cost for item in self._items.values())

    def get(self, key: tuple, artifact: str, sha256: str, size: int) -> onnx_runtime.OnnxModel:
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
                return item.model
            lock = self._loading.setdefault(key, threading.Lock())
        with lock:
            with self._lock:
                item = self._items.get(key)
                if item is not None:
                    return item.model
            model = self.loader(artifact, sha256)
            cost = int(size * self.factor)
            with self._lock:
                while self._items and self.used + cost > self.budget:
                    old, _ = self._items.popitem(last=False)
                    logger.info("unloaded %s version %s (memory budget)", old[0], old[1])
                self._items[key] = _Loaded(model, cost)
                self._loading.pop(key, None)
            return model

    def retain(self, keys: set) -> None:
        with self._lock:
            for key in [k for k in self._items if k not in keys]:
                del self._items[key]
                logger.info("unloaded %s version %s (no longer serving)", key[0], key[1])

    def keys(self) -> list[tuple]:
        with self._lock:
            return list(self._items)


class WorkerRuntime:
    """Runs ``modelhost.infer`` payloads for one device."""

    def __init__(self, device: str, providers: list, cache_dir: Path, budget: int, redis_client, options=None):
        self.device = device
        self.providers = providers
        self.cache_dir = Path(cache_dir)
        self.redis = redis_client
        self.options = options or onnx_runtime.session_options()
        self.sessions = LRUSessions(self._load, budget)

    def _load(self, artifact: str, sha256: str) -> onnx_runtime.OnnxModel:
        from models_store import storage

        started = time.perf_counter()
        path = storage.copy_artifact(artifact, self.cache_dir / sha256)
        session = onnx_runtime.create_session(path, self.options, self.providers)
        logger.info("loaded %s on %s in %.1f ms", artifact, self.device, (time.perf_counter() - started) * 1e3)
        return onnx_runtime.OnnxModel(session)

    def on_snapshot(self, snapshot: dict) -> None:
        """Drop sessions of versions that no longer serve (retired, failed, deleted)."""
        keys = {v.key for m in snapshot.values() for v in m.versions.values() if v.serving}
        self.sessions.retain(keys)

    def infer(self, payload: dict) -> dict:
        """{"outputs": [arrays]} or {"error": {"code", "message"}}."""
        try:
            remaining = payload["deadline"] - time.time()
            if remaining <= 0:
                raise DeadlineExceeded("the request's deadline passed before a worker took it")
            key = (payload["model"], payload["version"], payload["sha256"])
            try:
                model = self.sessions.get(key, payload["artifact"], payload["sha256"], payload.get("size", 0))
            except InferenceError:
                raise
            except Exception as exc:
                raise ModelNotReady(
                    f"version {payload['version']} of model '{payload['model']}' failed to load on {self.device}: {exc}"
                ) from None
            options = ort.RunOptions()
            options.log_severity_level = 4
            token = watchdog.watch(time.monotonic() + remaining, options)
            try:
                outputs = model.run(payload["inputs"], payload["outputs"], options)
            finally:
                watchdog.done(token)
            return {"outputs": [np.asarray(o) for o in outputs]}
        except InferenceError as exc:
            return {"error": {"code": exc.code, "message": exc.message}}
        except Exception as exc:  # never leave the front end waiting
            logger.exception("inference failed on %s", self.device)
            return {"error": {"code": "INTERNAL", "message": f"the worker failed: {type(exc).__name__}"}}

    def reply(self, key: str, result: dict) -> None:
        pipe = self.redis.pipeline()
        pipe.rpush(key, wire.dumps(result))
        pipe.expire(key, 120)
        pipe.execute()


runtime: WorkerRuntime | None = None
