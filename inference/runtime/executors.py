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

from inference.protocol.errors import ModelNotReady
from inference.runtime.onnx import OnnxModel

logger = logging.getLogger(__name__)


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

    def __len__(self) -> int:
        return len(self._models)


class InProcessExecutor:
    """Runs sessions in this process (``INFERENCE_EXECUTOR=inprocess``)."""

    def __init__(self, cache: SessionCache):
        self.cache = cache

    def run(self, entry, feeds: dict[str, np.ndarray], output_names: list[str]) -> list[np.ndarray]:
        return self.cache.get(entry).run(feeds, output_names)

    def on_snapshot(self, snapshot: dict) -> None:
        """Keep only sessions of versions that still serve."""
        keys = {v.key for m in snapshot.values() for v in m.versions.values() if v.serving}
        self.cache.retain(keys)
