"""Worker mode and sequence batching: two workers serve one device; each
sequence sticks to the worker that holds its state (over REST, where the
front end waits in a thread, and gRPC, on its event loop); when that worker
is killed, the sequence's next requests answer 503 naming the lost sequence,
never a silent restart from zero state on the other worker, and a new START
serves again. Real Redis (database TEST_WORKER_REDIS_DB), real ``runworker``
processes."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest
import redis
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import onnx_models as m
from tests.support.live import wait_for
from tests.support.server import LiveServer

pytestmark = pytest.mark.workers

REDIS_URL = f"redis://127.0.0.1:6379/{os.environ.get('TEST_WORKER_REDIS_DB', '10')}"
STATE = 'state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] } ]'
CONFIG = m.sequence_config("acc", kinds=("START",), state=STATE, idle_us=60_000_000, max_batch_size=32)  # 32 slots


def _send(client, value: int, sequence_id, start: bool = False) -> int:
    module = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    inp = module.InferInput("INPUT", [1, 1], "INT32")
    inp.set_data_from_numpy(np.full((1, 1), value, dtype=np.int32))
    return int(client.infer("acc", [inp], sequence_id=sequence_id, sequence_start=start).as_numpy("OUTPUT")[0][0])


def _outcome(client, value: int, sequence_id, start: bool = False):
    try:
        return ("ok", _send(client, value, sequence_id, start))
    except InferenceServerException as exc:
        return (str(exc.status()), exc.message())


def test_a_sequence_sticks_to_its_worker_and_a_lost_one_is_named(tmp_path):
    repo = tmp_path / "repo"
    m.write_model(repo, "acc", m.sequence_accumulator(), config=CONFIG)
    redis.Redis.from_url(REDIS_URL).flushdb()
    live = LiveServer(repo, tmp_path / "live", extra_env={"INFERENCE_EXECUTOR": "workers", "REDIS_URL": REDIS_URL})
    live.start()
    try:
        for host in ("host-a", "host-b"):
            live.start_worker("cpu", name=host, args=("--hostname", host, "--no-control"))
        live.wait_for_workers(("host-a", "host-b"))
        client = redis.Redis.from_url(REDIS_URL)
        clients = {
            "http": httpclient.InferenceServerClient(live.http_url),
            "grpc": grpcclient.InferenceServerClient(live.grpc_url),
        }
        ids = {"http": list(range(1, 17)), "grpc": [f"g-{i}" for i in range(12)]}
        rng = np.random.default_rng(5)
        sums = {}
        for step in range(3):  # interleaved: round robin would send every other request to the other worker
            for transport, sequence_ids in ids.items():
                for sid in sequence_ids:
                    value = int(rng.integers(-100, 100))
                    sums[sid] = (0 if step == 0 else sums[sid]) + value
                    assert _send(clients[transport], value, sid, start=step == 0) == sums[sid]
        live.worker_processes["host-a"].send_signal(signal.SIGKILL)
        live.worker_processes["host-a"].wait()
        lost, kept = [], []
        for transport, sequence_ids in ids.items():
            for sid in sequence_ids:
                status, answer = _outcome(clients[transport], 1, sid)
                if status == "ok":
                    sums[sid] += 1
                    assert answer == sums[sid], sid  # the survivor's sequences go on, state intact
                    kept.append(sid)
                else:
                    assert status in ("503", "StatusCode.UNAVAILABLE"), (sid, status, answer)
                    quoted = f'"{sid}"' if isinstance(sid, str) else str(sid)
                    assert f"sequence {quoted} of model 'acc' was lost: the infer.cpu worker host-a-" in answer
                    assert "start the sequence again (sequence_start)" in answer
                    lost.append((transport, sid))
        assert lost and kept, (lost, kept)
        assert {t for t, _ in lost} == {"http", "grpc"}
        # Once host-a's heartbeat expired too: still the lost error, never a fresh state elsewhere.
        assert wait_for(lambda: len(list(client.scan_iter("modelhost:worker:infer.cpu:*"))) == 1, timeout=15)
        time.sleep(1.0)
        for transport, sid in lost:
            status, answer = _outcome(clients[transport], 1, sid)
            assert status != "ok" and "was lost" in answer and "heartbeat is gone" in answer, (sid, answer)
        transport, sid = lost[0]
        assert _send(clients[transport], 9, sid, start=True) == 9  # a new START serves on host-b
        assert _send(clients[transport], 1, sid) == 10
    finally:
        assert live.stop() == 0, live.log()
