"""The front end's worker directory against a real Redis (database
TEST_REDIS_DB, default 8), with heartbeats written as workers write them:
live workers, queue and pool depths on /metrics and as Redis lists for
KEDA's Redis scaler, and nothing stale once a worker is gone."""

from __future__ import annotations

import time

import pytest
import redis

from inference.observability import metrics as observability
from inference.workers import messages
from inference.workers.placement import WorkerDirectory, depth_key, heartbeat_key, pool_depth_key
from tests.support import redis_db

pytestmark = pytest.mark.workers

REDIS_URL = redis_db.url("TEST_DIRECTORY_REDIS_DB", 7)


@pytest.fixture
def client():
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    yield client
    client.flushdb()


@pytest.fixture
def started():
    """``started(directory)`` starts it for the test; it stops at the end (no thread left reading Redis)."""
    directories = []

    def start(directory: WorkerDirectory) -> WorkerDirectory:
        directory.start()
        directories.append(directory)
        return directory

    yield start
    for directory in directories:
        directory.stop()


def test_stop_ends_the_refreshing_thread(client):
    _beat(client, "infer.cpu", "cpu-w-1", 0, 0.0, "cpu")
    directory = WorkerDirectory(client, interval=0.05)
    directory.start()
    thread = directory._thread
    assert thread.is_alive() and [w.id for w in directory.workers()] == ["cpu-w-1"]
    directory.stop()
    assert not thread.is_alive()
    client.delete(heartbeat_key("infer.cpu", "cpu-w-1"))
    time.sleep(0.2)  # four intervals: a thread still refreshing would have dropped the worker
    assert [w.id for w in directory.workers()] == ["cpu-w-1"]  # the last view stays readable
    directory.start()  # started again: it refreshes again
    assert directory._thread.is_alive() and directory._thread is not thread
    assert directory.workers() == []  # start() read the heartbeats: the worker's is gone
    _beat(client, "infer.cpu", "cpu-w-2", 0, 0.0, "cpu")
    time.sleep(0.3)  # six intervals
    assert [w.id for w in directory.workers()] == ["cpu-w-2"]
    directory.stop()
    client.delete(heartbeat_key("infer.cpu", "cpu-w-2"))
    observability.watch_workers(None)


def _beat(client, queue, worker_id, busy, fraction, pool):
    announced = messages.Announcement(
        "cpu" if queue == "infer.cpu" else "cuda:0", address="127.0.0.1:7070", host=worker_id.rsplit("-", 1)[0],
        busy=busy, busy_fraction=fraction, pool=pool,
    )  # fmt: skip
    client.set(heartbeat_key(queue, worker_id), messages.encode_json(announced), px=5000)


@pytest.mark.django_db  # /metrics reads the served models too (Triton's nv_* series)
def test_depths_for_prometheus_and_keda(client, started):
    _beat(client, "infer.cuda0", "a100-x-1", 3, 0.75, "gpu-a100")
    _beat(client, "infer.cuda0", "a100-y-1", 2, 0.5, "gpu-a100")
    _beat(client, "infer.cuda0", "t4-z-1", 4, 1.0, "gpu-t4")
    _beat(client, "infer.cpu", "cpu-w-1", 0, 0.0, "cpu")
    directory = WorkerDirectory(client, publish_depth=True)
    other = WorkerDirectory(client, publish_depth=True)  # another front-end process
    started(directory)
    other.refresh()
    assert client.llen(depth_key("infer.cuda0")) == 9 and client.llen(depth_key("infer.cpu")) == 0
    assert client.llen(pool_depth_key("gpu-a100")) == 5 and client.llen(pool_depth_key("gpu-t4")) == 4
    assert 0 < client.pttl(pool_depth_key("gpu-t4")) <= 5000  # gone soon if no front end refreshes it
    text = observability.render_metrics().decode()
    assert 'modelhost_worker_queue_depth{queue="infer.cuda0"} 9.0' in text
    assert 'modelhost_worker_pool_depth{pool="gpu-a100"} 5.0' in text
    assert 'modelhost_worker_busy_fraction{host="t4-z",pool="gpu-t4",queue="infer.cuda0",worker="t4-z-1"} 1.0' in text
    assert 'modelhost_workers{pool="gpu-a100",queue="infer.cuda0"} 2.0' in text
    client.delete(heartbeat_key("infer.cuda0", "t4-z-1"))  # its heartbeat expired
    directory.refresh()
    text = observability.render_metrics().decode()
    assert "t4-z-1" not in text and 'pool="gpu-t4"' not in text
    assert client.llen(depth_key("infer.cuda0")) == 5 and not client.exists(pool_depth_key("gpu-t4"))
    observability.watch_workers(None)


class CountingRedis(redis.Redis):
    """A real client that counts the SCANs (one per read of the heartbeats)."""

    scans = 0

    def scan_iter(self, *args, **kwargs):
        CountingRedis.scans += 1
        return super().scan_iter(*args, **kwargs)


def test_a_miss_reads_the_heartbeats_again(client, started):
    """A request that finds no worker reads the heartbeats again unless a
    read started after its miss; misses at once share one read; while they
    keep coming, at most one read per CATCH_UP_SECONDS."""
    import threading

    from inference.workers.placement import CATCH_UP_SECONDS

    counting = CountingRedis.from_url(REDIS_URL)
    directory = WorkerDirectory(counting, interval=3600)  # its own refresh never comes during the test
    started(directory)
    assert directory.candidates(()) == []
    _beat(client, "infer.cpu", "late-1", 0, 0.0, "cpu")  # a worker starts right after the last read
    assert directory.candidates(()) == []  # the directory has not seen it yet
    directory.catch_up(time.monotonic())  # even right after a read: that read was before the miss
    assert [w.id for w in directory.candidates(())] == ["late-1"]
    client.delete(heartbeat_key("infer.cpu", "late-1"))
    before = CountingRedis.scans
    directory.catch_up(time.monotonic() - 1.0)  # a miss older than the last read: nothing to do
    directory.catch_up(time.monotonic())  # a second miss within CATCH_UP_SECONDS of the last one: not again
    assert CountingRedis.scans == before and [w.id for w in directory.candidates(())] == ["late-1"]
    time.sleep(CATCH_UP_SECONDS)
    missed = time.monotonic()
    threads = [threading.Thread(target=directory.catch_up, args=(missed,)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert CountingRedis.scans == before + 1  # 8 misses at once share one read
    assert directory.candidates(()) == []
