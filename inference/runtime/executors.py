"""Executors run a model version's session for the data plane.

:class:`InProcessExecutor` (the embedded default) runs ONNX Runtime in the
server process, with sessions created lazily and cached per version.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import numpy as np
import onnxruntime as ort

from inference.protocol.errors import DeadlineExceeded, ModelNotReady
from inference.runtime.deadlines import watchdog
from inference.runtime.onnx import OnnxModel

logger = logging.getLogger(__name__)


def _observe_load(entry, seconds: float, loaded: int) -> None:
    from inference import observability

    if entry is not None:
        observability.LOAD_TIME.labels(entry.model_name, str(entry.number)).observe(seconds)
    observability.LOADED_SESSIONS.set(loaded)


class SessionCache:
    """Loaded models keyed by ``(model, version, sha256)``; each loads once even
    when many threads ask at the same time. ``factory(entry)`` builds one."""

    def __init__(self, factory: Callable[[object], OnnxModel]):
        self._factory = factory
        self._models: dict[tuple, OnnxModel] = {}
        self._locks: dict[tuple, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, entry) -> OnnxModel:
        model = self._models.get(entry.key)
        if model is not None:
            return model
        with self._guard:
            lock = self._locks.setdefault(entry.key, threading.Lock())
        with lock:
            model = self._models.get(entry.key)
            if model is None:
                started = time.perf_counter()
                try:
                    model = self._factory(entry)
                except Exception as exc:
                    logger.exception("loading %s version %s failed", entry.model_name, entry.number)
                    raise ModelNotReady(
                        f"version {entry.number} of model '{entry.model_name}' failed to load: {exc}"
                    ) from None
                self._models[entry.key] = model
                _observe_load(entry, time.perf_counter() - started, len(self._models))
                logger.info(
                    "loaded %s version %s in %.1f ms",
                    entry.model_name,
                    entry.number,
                    (time.perf_counter() - started) * 1e3,
                )
        return model

    def retain(self, keys: set) -> None:
        """Drop every loaded model whose key is not in ``keys``."""
        with self._guard:
            for key in [k for k in self._models if k not in keys]:
                del self._models[key]
                self._locks.pop(key, None)
                logger.info("unloaded %s version %s", key[0], key[1])
            _observe_load(None, 0.0, len(self._models))

    def __len__(self) -> int:
        return len(self._models)


class InProcessExecutor:
    """Runs sessions in this process (``INFERENCE_EXECUTOR=inprocess``)."""

    def __init__(self, cache: SessionCache):
        self.cache = cache

    def run(
        self,
        entry,
        feeds: dict[str, np.ndarray],
        output_names: list[str],
        deadline: float | None = None,
        parameters: dict | None = None,
    ) -> list[np.ndarray]:
        """Run ``entry``'s session. ``deadline`` (time.monotonic()) stops a run
        that outlives it (DeadlineExceeded); ``parameters`` are the request's,
        which an ONNX model ignores."""
        model = self.cache.get(entry)
        if deadline is None:
            return model.run(feeds, output_names)
        if time.monotonic() >= deadline:
            raise DeadlineExceeded("the request's deadline passed before the model ran")
        options = ort.RunOptions()
        options.log_severity_level = 4  # a terminated run is expected here, not an error to log
        token = watchdog.watch(deadline, options)
        try:
            return model.run(feeds, output_names, options)
        finally:
            watchdog.done(token)

    def on_snapshot(self, snapshot: dict) -> None:
        """Keep only sessions of versions that still serve."""
        keys = {v.key for m in snapshot.values() for v in m.versions.values() if v.serving}
        self.cache.retain(keys)
