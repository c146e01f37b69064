"""The response cache shared by every front end through Redis
(``RESPONSE_CACHE_REDIS_URL``), in front of each process's own
:class:`~inference.response_cache.ResponseCache`.

A lookup asks the process's cache first, then Redis (an answer found there
is kept in the process too); an answer computed here goes to both. Entries
live ``RESPONSE_CACHE_REDIS_TTL_SECONDS`` in Redis; bound the memory with
Redis's own ``maxmemory`` and ``maxmemory-policy allkeys-lru`` on the
instance (or database) the URL names. The keys are the process cache's
(SHA-256 of the model, the exact version and sha256 served, the inputs and
the outputs asked for), so no other version's answer can be served.

Redis is an accelerator, never a dependency: when it fails or is slower than
``RESPONSE_CACHE_REDIS_TIMEOUT_SECONDS``, the request goes on as a miss, the
outage is logged once (:class:`~inference.observability.outage.DependencyWatch`), and
Redis is not asked again for a second.

Entry format (msgpack): a list of ``[dtype, shape, data]`` per output, where
``data`` is the array's bytes (C order) or, for BYTES (``object``), the list
of its elements' bytes.
Reference: Triton's response cache with a Redis cache implementation,
https://github.com/triton-inference-server/redis_cache.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import msgspec
import numpy as np

from inference.observability.outage import DependencyWatch
from inference.response_cache import ResponseCache, _nbytes

logger = logging.getLogger(__name__)

PREFIX = b"modelhost:response:"
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(list[tuple[str, list[int], bytes | list[bytes]]])


def encode(outputs: Sequence[np.ndarray]) -> bytes:
    """Outputs (numpy arrays; BYTES as object arrays of bytes or str) as one Redis value."""
    entry = []
    for array in outputs:
        if array.dtype == object:
            items = [item if isinstance(item, bytes) else str(item).encode() for item in array.reshape(-1)]
            entry.append(("object", list(array.shape), items))
        else:
            entry.append((array.dtype.str, list(array.shape), np.ascontiguousarray(array).tobytes()))
    return _encoder.encode(entry)


def decode(value: bytes) -> tuple[np.ndarray, ...]:
    """The read-only arrays :func:`encode` stored; raises ValueError for a value it did not write."""
    try:
        entry = _decoder.decode(value)
    except msgspec.DecodeError as exc:
        raise ValueError(f"not a response-cache entry: {exc}") from None
    out = []
    for dtype, shape, data in entry:
        if dtype == "object":
            array = np.empty(len(data), dtype=object)
            array[:] = data
            array = array.reshape(shape)
        else:
            array = np.frombuffer(data, dtype=np.dtype(dtype)).reshape(shape)
        array.flags.writeable = False
        out.append(array)
    return tuple(out)


class SharedResponseCache(ResponseCache):
    """A process's ResponseCache (``budget_bytes``) backed by Redis
    (``client``: a ``redis.Redis``; entries expire after ``ttl_seconds``).
    Same interface: ``get(key)``, ``put(key, outputs)``."""

    RETRY_SECONDS = 1.0

    def __init__(self, budget_bytes: int, client, ttl_seconds: int = 3600):
        super().__init__(budget_bytes)
        self.client = client
        self.ttl = ttl_seconds
        self.watch = DependencyWatch("the shared response cache (Redis)", logger)
        self._skip_until = 0.0

    def _usable(self) -> bool:
        return not self.watch.down or time.monotonic() >= self._skip_until

    def _failed(self, exc: Exception) -> None:
        self._skip_until = time.monotonic() + self.RETRY_SECONDS
        self.watch.failed(exc, "answers are looked up in each process's cache only")

    def get(self, key: bytes) -> tuple[np.ndarray, ...] | None:
        outputs = super().get(key)
        if outputs is not None or not self._usable():
            return outputs
        try:
            value = self.client.get(PREFIX + key)
        except Exception as exc:  # redis.RedisError, OSError: a miss
            self._failed(exc)
            return None
        self.watch.ok()
        if value is None:
            return None
        try:
            outputs = decode(value)
        except ValueError:
            logger.warning("dropped a response-cache entry that does not decode")
            return None
        size = _nbytes(outputs)
        if size <= self.budget // 8:
            self._keep(key, outputs, size)  # decoded into arrays of its own, read-only: no copy
        return outputs

    def put(self, key: bytes, outputs: Sequence[np.ndarray]) -> bool:
        kept = super().put(key, outputs)
        if not kept or not self._usable():
            return kept
        try:
            self.client.set(PREFIX + key, encode(outputs), ex=self.ttl)
        except Exception as exc:  # redis.RedisError, OSError: kept in this process only
            self._failed(exc)
            return kept
        self.watch.ok()
        return kept
