"""The worker link under load and under a handshake flood (issue 34, T1 and
T3): a live ``serve`` in worker mode and one real ``runworker`` (its Unix
socket for the front ends of this machine, mutual TLS on TCP for the
others).

- T1: one team's 400 gRPC calls in flight at once for one model: each
  front-end process holds at most WORKER_CONNECTIONS_PER_PROCESS
  connections to the worker (counted by the kernel, ``ss``), none of the
  calls answers UNAVAILABLE, and another team's requests to another model
  on the same worker all succeed meanwhile.
- T3: connections that never start their TLS handshake, more than the
  worker's handshake budget, from four addresses and reopened as soon as
  the worker cuts them, while a front end with this deployment's
  certificate opens a new connection for every request: every request
  succeeds.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import select
import socket
import threading
import time

import numpy as np
import pytest
import redis
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inference.runtime.execution import RunTarget
from inference.workers import link, messages
from inference.workers.client.executor import RemoteExecutor
from inference.workers.placement import Worker, queue_for
from inference.workers.server.admission import Limits
from tests.support import onnx_models as m
from tests.support import peers, redis_db
from tests.support.certs import worker_link
from tests.support.live import bearer, people_with_tokens, run_coroutine
from tests.support.server import LiveServer

pytestmark = pytest.mark.workers

REDIS_URL = redis_db.url("TEST_CAPACITY_REDIS_DB", 12)
POOL = 8  # WORKER_CONNECTIONS_PER_PROCESS: small, so that 400 calls in flight would exceed it many times
ITERATIONS = 100  # the busy model's loop: about 2 ms a run
AFFINE = m.affine(2.0, 1.0)  # y = 2x + 1


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    redis.Redis.from_url(REDIS_URL).flushdb()
    certs = tmp_path_factory.mktemp("capacity-tls")
    front_end_tls, worker_tls = worker_link(certs)
    repo = tmp_path_factory.mktemp("capacity-repo")
    # 16 instances: more requests run at once per front-end process than its pool holds connections
    m.write_model(repo, "busy", m.slow_loop(), config="instance_group [ { kind: KIND_CPU count: 16 } ]\n")
    m.write_model(repo, "other", AFFINE, config="instance_group [ { kind: KIND_CPU } ]\n")
    server = LiveServer(
        repo,
        tmp_path_factory.mktemp("capacity-live"),
        extra_env={"INFERENCE_EXECUTOR": "workers", "REDIS_URL": REDIS_URL, "WORKER_CONNECTIONS_PER_PROCESS": str(POOL),
                   **front_end_tls},
        worker_env={**worker_tls, "WORKER_LISTEN": "127.0.0.1:0"},
        devices=("cpu",),
    )  # fmt: skip
    server.start()
    server.wait_for_workers()
    server.certs, server.redis = certs, redis.Redis.from_url(REDIS_URL)
    try:
        yield server
    finally:
        assert server.stop() == 0, server.log()


def _announcement(live) -> tuple[str, messages.Announcement]:
    pid = live.worker_processes["cpu"].pid
    for key in live.redis.scan_iter(f"modelhost:worker:{queue_for('cpu')}:*-{pid}"):
        return key.decode().rsplit(":", 1)[1], messages.announcement_json.decode(live.redis.get(key))
    raise AssertionError("no heartbeat of the cpu worker")


def _inputs(module, x: np.ndarray):
    inputs = [module.InferInput("x", [1, 256], "FP32"), module.InferInput("n", [], "INT64")]
    inputs[0].set_data_from_numpy(x)
    inputs[1].set_data_from_numpy(np.array(ITERATIONS, dtype=np.int64))
    return inputs


def test_a_burst_holds_at_most_the_pool_per_process_and_others_are_served(live):
    """Team A's 400 gRPC calls in flight at once (an asyncio client, 6 s)
    for "busy": each front-end process's connections to the worker, sampled
    from the kernel (``ss``) throughout, never exceed the pool's cap (and
    reach it: the burst waits for the pool, not for the client); every
    answer is the numpy value and none is UNAVAILABLE (a call the front
    end's admission refuses for the team's backlog, RESOURCE_EXHAUSTED, is
    not the link's doing); team B's REST and gRPC requests to "other" all
    succeed meanwhile."""
    tokens = people_with_tokens(live, burster=f"burst{os.getpid()}", steady=f"calm{os.getpid()}")
    _, announced = _announcement(live)
    x = np.full((1, 256), 0.5, dtype=np.float32)
    expected = m.slow_loop_expected(x, ITERATIONS)
    samples: list = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append(peers.unix_connections(announced.unix))
            time.sleep(0.02)

    other_outcomes: list = []

    def other_caller() -> None:
        http = httpclient.InferenceServerClient(live.http_url)
        grpc_c = grpcclient.InferenceServerClient(live.grpc_url)
        rng = np.random.default_rng(3)
        headers = bearer(tokens["steady"])
        metadata = {"authorization": f"Bearer {tokens['steady']}"}
        while not done.is_set():
            for module, client in ((httpclient, http), (grpcclient, grpc_c)):
                v = rng.standard_normal((2, 4)).astype(np.float32)
                inp = module.InferInput("x", [2, 4], "FP32")
                inp.set_data_from_numpy(v)
                try:
                    y = client.infer("other", [inp], headers=headers if module is httpclient else metadata)
                    y = y.as_numpy("y")
                    other_outcomes.append(("ok", float(np.max(np.abs(y - (2 * v + 1))))))
                except InferenceServerException as exc:
                    other_outcomes.append((exc.status(), exc.message()))

    async def burst() -> list:
        outcomes: list = []
        stop = time.monotonic() + 6.0
        metadata = {"authorization": f"Bearer {tokens['burster']}"}
        async with aioclient.InferenceServerClient(live.grpc_url) as client:

            async def caller() -> None:
                while time.monotonic() < stop:
                    try:
                        answer = await client.infer("busy", _inputs(aioclient, x), client_timeout=60, headers=metadata)
                        outcomes.append(("ok", answer.as_numpy("y")))
                    except InferenceServerException as exc:
                        outcomes.append((exc.status(), exc.message()))

            await asyncio.gather(*(caller() for _ in range(400)))
        return outcomes

    threads = [threading.Thread(target=sample), threading.Thread(target=other_caller)]
    for thread in threads:
        thread.start()
    try:
        outcomes = run_coroutine(burst())
    finally:
        done.set()
        for thread in threads:
            thread.join(30)
    failed = [o for o in outcomes if o[0] not in ("ok", "StatusCode.RESOURCE_EXHAUSTED")]
    assert not failed, (len(failed), failed[:3])
    answered = [y for status, y in outcomes if status == "ok"]
    assert len(answered) >= 400
    for y in answered:
        np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-6)
    peaks = [max(counts.values(), default=0) for counts in samples]
    assert len(samples) >= 10 and max(peaks) == POOL, (len(samples), max(peaks))
    other_failed = [o for o in other_outcomes if o[0] != "ok"]
    assert other_outcomes and not other_failed, other_failed[:3]
    assert max(error for _, error in other_outcomes) < 1e-5


class _HalfOpen:
    """Connections to ``address`` that never send a byte, ``per_address``
    from each source address of ``sources``, each reopened as soon as the
    worker closes it (the T3 flood), until :meth:`stop`. ``open_now``:
    how many are open."""

    def __init__(self, address, sources, per_address: int):
        self.address, self.sources, self.per_address = address, sources, per_address
        self.opened = 0
        self._stop = threading.Event()
        self._socks: list[socket.socket] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)
        for sock in self._socks:
            sock.close()

    @property
    def open_now(self) -> int:
        return len(self._socks)

    def _open(self, source: str) -> None:
        sock = socket.create_connection(self.address, timeout=2, source_address=(source, 0))
        sock.setblocking(False)
        self._socks.append(sock)
        self.opened += 1

    def _run(self) -> None:
        for source in self.sources:
            for _ in range(self.per_address):
                self._open(source)
        while not self._stop.is_set():
            readable, _, _ = select.select(self._socks, [], [], 0.05)
            for sock in readable:  # the worker closed it (a refusal or the handshake deadline): open another
                source = sock.getsockname()[0]
                self._socks.remove(sock)
                sock.close()
                try:
                    self._open(source)
                except OSError:
                    pass
            time.sleep(0.01)


def test_half_open_handshakes_never_lock_out_a_front_end_with_a_certificate(live):
    """64 connections from 4 addresses (127.0.0.2-5, 16 each: the worker's
    whole handshake budget) that never send a byte and reconnect when cut,
    for 12 s; meanwhile a front end (this test, with the deployment's
    front-end certificate, from 127.0.0.1) opens a new TLS connection for
    each of 40 requests: every one is answered right, and the flood kept
    the budget full (it was not cut down to size before the front end came)."""
    worker_id, announced = _announcement(live)
    host, port = announced.address.rsplit(":", 1)
    address = (host, int(port))
    files = link.TLSFiles(
        str(live.certs / "ca.crt"), str(live.certs / "frontend.crt"), str(live.certs / "frontend.key")
    )
    worker = Worker(worker_id, "infer.cpu", address, messages.Announcement("cpu", address=announced.address))

    class Directory:
        error = ""

        def candidates(self, placement):
            return [worker]

        def pick(self, key, workers):
            return workers[0]

        def is_live(self, worker_id):
            return True

        accepts = is_live

        def drop(self, worker_id):
            raise AssertionError("the worker does not drain")

    target = RunTarget("other", 1, hashlib.sha256(AFFINE).hexdigest(), "", 0)
    budget = Limits()
    log = live.worker_log_path("cpu")
    logged = log.stat().st_size
    sources = [f"127.0.0.{n}" for n in range(2, 6)]
    answered, full = 0, 0
    with _HalfOpen(address, sources, budget.pending_per_address) as flood:
        time.sleep(1.0)  # the flood holds every handshake place
        started = time.monotonic()
        for i in range(40):
            full += flood.open_now >= budget.pending
            executor = RemoteExecutor(Directory(), 1 << 26, tls=files)  # a new pool: a new connection
            x = np.full((1, 4), float(i), dtype=np.float32)
            run = executor.run(target, {"x": x}, ["y"], deadline=time.monotonic() + 10)
            np.testing.assert_allclose(run.outputs[0], 2 * x + 1)
            executor.pool.forget(worker_id)
            answered += 1
            time.sleep(max(0.0, started + 0.3 * (i + 1) - time.monotonic()))
    assert answered == 40
    assert full >= 35, full  # the flood held the whole budget whenever the front end connected
    written = log.read_text()[logged:]
    assert "for handshakes" in written and "Traceback" not in written
