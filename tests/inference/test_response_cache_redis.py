"""The response cache shared through Redis (a real Redis, a database of its
own): entries round-trip exactly, one process's answer serves another, and
a Redis that is gone turns lookups into misses without failing a request."""

from __future__ import annotations

import logging
import socket

import numpy as np
import pytest
import redis

from inference.response_cache_redis import PREFIX, SharedResponseCache, decode, encode
from tests.support import redis_db

URL = redis_db.url("TEST_RESPONSE_CACHE_REDIS_DB", 6)


@pytest.fixture
def client():
    connection = redis.Redis.from_url(URL, socket_timeout=1.0)
    connection.flushdb()
    yield connection
    connection.flushdb()


ARRAYS = [
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.array([[True, False]]),
    np.array([1.5, -2.25], dtype=np.float16),
    np.arange(6, dtype=np.int64).reshape(2, 3)[:, ::2],  # not contiguous
    np.array([[b"a", b""], [b"\x00\xff", "text"]], dtype=object),
    np.zeros((0, 3), dtype=np.uint8),
]


def test_entries_round_trip_exactly_and_read_only():
    decoded = decode(encode(ARRAYS))
    assert len(decoded) == len(ARRAYS)
    for got, sent in zip(decoded, ARRAYS, strict=True):
        assert got.dtype == sent.dtype and got.shape == sent.shape and not got.flags.writeable
        if sent.dtype == object:
            assert got.tolist() == [[b"a", b""], [b"\x00\xff", b"text"]]
        else:
            np.testing.assert_array_equal(got, sent)
    with pytest.raises(ValueError, match="not a response-cache entry"):
        decode(b"\x93garbage")


def test_one_processs_answer_serves_another_and_expires(client):
    first = SharedResponseCache(1 << 20, client, ttl_seconds=60)
    second = SharedResponseCache(1 << 20, client, ttl_seconds=60)  # another process: an empty cache of its own
    key = b"k" * 32
    assert second.get(key) is None
    assert first.put(key, ARRAYS[:2])
    got = second.get(key)
    np.testing.assert_array_equal(got[0], ARRAYS[0])
    np.testing.assert_array_equal(got[1], ARRAYS[1])
    assert len(second) == 1  # kept in the second process too: the next lookup stays local
    assert 55 <= client.ttl(PREFIX + key) <= 60


def test_an_answer_too_large_for_the_process_is_not_shared_either(client):
    cache = SharedResponseCache(8 * 1024, client)
    assert not cache.put(b"big" * 10, [np.zeros(2048, np.float32)])  # 8 KiB > an eighth of the budget
    assert client.dbsize() == 0


def test_a_redis_that_is_gone_is_a_miss_logged_once(caplog):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens here
    gone = redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.2, socket_connect_timeout=0.2)
    cache = SharedResponseCache(1 << 20, gone)
    caplog.set_level(logging.WARNING, logger="inference.response_cache_redis")
    assert cache.get(b"a" * 32) is None
    assert cache.put(b"a" * 32, ARRAYS[:1])  # kept in the process
    np.testing.assert_array_equal(cache.get(b"a" * 32)[0], ARRAYS[0])
    for _ in range(5):
        assert cache.get(b"b" * 32) is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("the shared response cache (Redis) is unreachable"), lines
    assert cache.watch.failures == 1  # Redis is not asked again within RETRY_SECONDS
