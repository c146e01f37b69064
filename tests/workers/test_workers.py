"""Worker mode end to end: real Redis, real `runworker` processes started by
the tests. Two workers on two queues (cpu, and cuda:0 running on the CPU
with WORKER_CPU_FALLBACK since this machine has no GPU): placement, no live
worker, a worker killed mid-request, a restarted worker, stale versions,
sequences sticking to their worker and lost with it, and Redis missing at
start-up or going away mid-run."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import redis
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import onnx_models as m
from tests.support import redis_db
from tests.support.live import wait_for
from tests.support.server import ROOT, LiveServer, free_port

pytestmark = pytest.mark.workers

REDIS_URL = redis_db.url("TEST_WORKERS_REDIS_DB", 3)  # and the next one (the kill test)
#: An accumulator with implicit state (sequence batching), 64 sequence slots per worker: every sequence of the
#: test below (48) fits on either worker. With 32, rendezvous hashing put 33 or more on one worker in 1.3% of
#: runs (the worker ids change per run) and the 33rd START waited in the backlog until its deadline.
SEQUENCES = m.sequence_config(
    "acc", kinds=("START",), max_batch_size=64, idle_us=60_000_000,
    state='state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] } ]',
) + "instance_group [ { kind: KIND_GPU }, { kind: KIND_CPU } ]\n"  # fmt: skip


def manage(server: LiveServer, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT, env=dict(server.env, **(env or {})), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    root = tmp_path_factory.mktemp("worker-repo")
    m.write_model(root, "on_gpu", m.affine(2.0, 1.0))
    m.write_model(root, "on_cpu", m.affine(3.0, 0.0))
    m.write_model(root, "anywhere", m.affine(1.0, 5.0))
    m.write_model(root, "on_gpu3", m.affine(1.0, 1.0))
    m.write_model(root, "on_gpu1", m.affine(-1.0, 2.0))
    m.write_model(root, "slow", m.slow_loop())
    m.write_model(root, "growing", m.affine(1.0, 1.0), version=1)
    m.write_model(root, "acc", m.sequence_accumulator(), config=SEQUENCES)  # a GPU group and a CPU group: both workers
    return root


@pytest.fixture(scope="module")
def server(repository, tmp_path_factory):
    redis.Redis.from_url(REDIS_URL).flushdb()
    live = LiveServer(
        repository,
        tmp_path_factory.mktemp("workers"),
        # 8 threads per HTTP process: the requests held in the kill test never take all of one.
        extra_env={
            "INFERENCE_EXECUTOR": "workers",
            "REDIS_URL": REDIS_URL,
            "WORKER_CPU_FALLBACK": "true",
            "HTTP_THREADS": "8",
        },
        devices=("cpu", "cuda:0"),
    )
    live.start()
    for name, args in (
        ("on_gpu", ["--kind", "GPU", "--gpus", "0"]),
        ("on_cpu", ["--kind", "CPU"]),
        ("on_gpu3", ["--kind", "GPU", "--gpus", "3"]),
        ("on_gpu1", ["--kind", "GPU", "--gpus", "1"]),
        ("slow", ["--kind", "GPU", "--gpus", "0"]),
    ):
        done = manage(live, "set_instance_group", name, *args)
        assert done.returncode == 0, done.stderr
    live.wait_for_workers()
    yield live
    assert live.stop() == 0


def _affine(client, module, model: str, rows: int = 2):
    x = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
    inp = module.InferInput("x", [rows, 4], "FP32")
    inp.set_data_from_numpy(x)
    return x, client.infer(model, [inp]).as_numpy("y")


def _loaded(server: LiveServer, device: str, model: str) -> bool:
    return f"loaded {model}/" in server.worker_log_path(device).read_text()


def test_placement_follows_the_instance_group(server):
    http = httpclient.InferenceServerClient(server.http_url)
    grpc_c = grpcclient.InferenceServerClient(server.grpc_url)
    for _ in range(3):
        x, y = _affine(http, httpclient, "on_gpu")
        np.testing.assert_allclose(y, 2 * x + 1)
        x, y = _affine(grpc_c, grpcclient, "on_cpu")
        np.testing.assert_allclose(y, 3 * x)
    assert _loaded(server, "cuda:0", "on_gpu") and not _loaded(server, "cpu", "on_gpu")
    assert _loaded(server, "cpu", "on_cpu") and not _loaded(server, "cuda:0", "on_cpu")
    for _ in range(4):  # no instance group: KIND_AUTO, the GPU worker while one is live, never the CPU's
        x, y = _affine(http, httpclient, "anywhere")
        np.testing.assert_allclose(y, x + 5)
    assert _loaded(server, "cuda:0", "anywhere") and not _loaded(server, "cpu", "anywhere")


def test_large_requests_share_memory_with_a_worker_on_the_same_machine(server):
    """Requests of 640 KB and then 3.2 MB (past the first shared memory:
    a larger one is announced) over REST and gRPC to the cpu worker: exact
    answers, and the worker maps the front ends' shared memory (memfd)
    instead of reading the tensors from the socket."""
    for module, url in ((httpclient, server.http_url), (grpcclient, server.grpc_url)):
        client = module.InferenceServerClient(url)
        for rows in (40_000, 200_000, 40_000):
            x = np.random.default_rng(rows).random((rows, 4), dtype=np.float32)
            inp = module.InferInput("x", [rows, 4], "FP32")
            inp.set_data_from_numpy(x)
            np.testing.assert_array_equal(client.infer("on_cpu", [inp]).as_numpy("y"), 3 * x)
    maps = open(f"/proc/{server.worker_processes['cpu'].pid}/maps").read()
    assert "memfd:modelhost-frame" in maps


def test_a_worker_on_the_same_machine_reads_and_writes_shared_memory_regions_itself(server):
    """Triton's system shared memory in worker mode with the workers on this
    machine (Unix sockets): inputs read from and outputs written into the
    client's regions, exact over REST and gRPC; and the worker reads and
    writes the client's object itself, through its descriptor (no mapping,
    no copy through the front end): an 8 MiB input and output move the
    worker's read and write counters (``/proc/<pid>/io`` rchar and wchar:
    pread and pwrite count there, a socket's recv and send do not) by at
    least their bytes, the front end's by less."""
    import tritonclient.utils.shared_memory as shm

    from tests.support.rss import process_tree

    tag = secrets.token_hex(6)
    x = np.random.default_rng(7).random((8, 4), dtype=np.float32)
    big = np.random.default_rng(8).random((1 << 19, 4), dtype=np.float32)  # 8 MiB
    size = 16 + big.nbytes
    handles = [shm.create_shared_memory_region(f"{n}-{tag}", f"/mh-w-{n}-{tag}", size) for n in ("in", "out")]
    try:
        shm.set_shared_memory_region(handles[0], [x], offset=16)
        for module, url in ((httpclient, server.http_url), (grpcclient, server.grpc_url)):
            client = module.InferenceServerClient(url)
            client.register_system_shared_memory("in", f"/mh-w-in-{tag}", size)
            client.register_system_shared_memory("out", f"/mh-w-out-{tag}", size)
            try:
                inp = module.InferInput("x", [8, 4], "FP32")
                inp.set_shared_memory("in", x.nbytes, offset=16)
                out = module.InferRequestedOutput("y")
                out.set_shared_memory("out", 1024, offset=32)
                client.infer("on_cpu", [inp], outputs=[out])
                y = shm.get_contents_as_numpy(handles[1], np.float32, [8, 4], offset=32)
                np.testing.assert_array_equal(y, 3 * x)
                shm.set_shared_memory_region(handles[1], [np.zeros((8, 4), np.float32)], offset=32)
            finally:
                client.unregister_system_shared_memory()

        http = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
        http.register_system_shared_memory("in", f"/mh-w-in-{tag}", size)
        http.register_system_shared_memory("out", f"/mh-w-out-{tag}", size)
        shm.set_shared_memory_region(handles[0], [big], offset=16)
        worker, front_end = [server.worker_processes["cpu"].pid], process_tree(server.process.pid)
        before = [_io(worker), _io(front_end)]
        inp = httpclient.InferInput("x", list(big.shape), "FP32")
        inp.set_shared_memory("in", big.nbytes, offset=16)
        out = httpclient.InferRequestedOutput("y")
        out.set_shared_memory("out", big.nbytes, offset=16)
        http.infer("on_cpu", [inp], outputs=[out])
        (worker_read, worker_wrote), (front_read, front_wrote) = [
            (after[0] - start[0], after[1] - start[1]) for start, after in zip(before, [_io(worker), _io(front_end)])
        ]
        np.testing.assert_array_equal(shm.get_contents_as_numpy(handles[1], np.float32, big.shape, offset=16), 3 * big)
        assert worker_read >= big.nbytes and worker_wrote >= big.nbytes, (worker_read, worker_wrote)
        assert front_read < big.nbytes and front_wrote < big.nbytes, (front_read, front_wrote)
        http.unregister_system_shared_memory()
    finally:
        for handle in handles:
            shm.destroy_shared_memory_region(handle)


def _io(pids: list[int]) -> tuple[int, int]:
    """(rchar, wchar) summed over ``pids`` (bytes they read and wrote with read/pread and write/pwrite)."""
    totals = [0, 0]
    for pid in pids:
        try:
            fields = dict(line.split(": ") for line in open(f"/proc/{pid}/io").read().splitlines())
        except OSError:  # exited meanwhile
            continue
        totals[0] += int(fields["rchar"])
        totals[1] += int(fields["wchar"])
    return totals[0], totals[1]


def test_a_client_shrinking_its_region_cannot_crash_a_worker_on_the_same_machine(server):
    """Issue 34 in worker mode with the worker on this machine, which reads
    and writes the client's region itself: the client truncates its 16 MiB
    region to 4 KiB and back while three threads infer from it (HTTP,
    gRPC); every answer is correct or a 400/INVALID_ARGUMENT saying the
    region shrank (some from the worker itself, which names the object's
    key), another caller is never refused, and the worker and the server's
    processes are the same processes after (no SIGBUS, no restart)."""
    from tests.support.rss import process_tree
    from tests.support.shrinking import Model, shrink_while_inferring

    model = Model("on_cpu", "x", "y", (1 << 16, 4), lambda x: 3 * x, (2, 4))
    processes = sorted(process_tree(server.process.pid))
    workers = {name: process.pid for name, process in server.worker_processes.items()}
    run = shrink_while_inferring(server, model, until=lambda run: run.whole and _from_the_worker(run))
    assert not run.failures, run.failures[:5]
    assert run.whole and _from_the_worker(run) and run.other, (run.whole, run.refused[:3], run.other)
    assert sorted(process_tree(server.process.pid)) == processes
    assert {name: p.pid for name, p in server.worker_processes.items() if p.poll() is None} == workers
    assert httpclient.InferenceServerClient(server.http_url).is_server_ready()
    x, y = _affine(grpcclient.InferenceServerClient(server.grpc_url), grpcclient, "on_cpu")
    np.testing.assert_array_equal(y, 3 * x)


def _from_the_worker(run) -> bool:
    """Whether a refusal came from the worker (it knows the object's key, not the region's name)."""
    return any(run.key in message and run.name not in message for message in run.refused)


def test_no_live_worker_for_the_device_is_503_at_once_with_retry_after(server):
    """503 at once, with ``Retry-After: 5`` (a heartbeat's expiry: a worker
    that starts is seen by then) over REST, and UNAVAILABLE with the same
    ``retry-after`` trailing metadata over gRPC."""
    import json
    from http.client import HTTPConnection

    import grpc
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc as pb_grpc

    http = httpclient.InferenceServerClient(server.http_url)
    started = time.monotonic()
    with pytest.raises(InferenceServerException) as info:
        _affine(http, httpclient, "on_gpu3")
    assert info.value.status() == "503"
    assert "no live worker serves cuda:3" in info.value.message()
    assert time.monotonic() - started < 1.0
    body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
    conn = HTTPConnection(*server.http_url.split(":"), timeout=10)
    conn.request("POST", "/v2/models/on_gpu3/infer", json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    answer = json.loads(response.read())
    assert (response.status, response.getheader("Retry-After")) == (503, "5"), answer
    assert "no live worker serves cuda:3" in answer["error"]
    request = pb.ModelInferRequest(model_name="on_gpu3")
    tensor = request.inputs.add(name="x", datatype="FP32", shape=[1, 4])
    tensor.contents.fp32_contents.extend([1, 2, 3, 4])
    with grpc.insecure_channel(server.grpc_url) as channel:
        with pytest.raises(grpc.RpcError) as failure:
            pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=10)
    assert failure.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "no live worker serves cuda:3" in failure.value.details()
    assert dict(failure.value.trailing_metadata())["retry-after"] == "5"


def test_a_worker_serves_as_soon_as_its_heartbeat_is_in_redis(server):
    """A worker for cuda:3 starts after the 503 above: the first requests,
    sent the moment its heartbeat is in Redis (the front ends' directories
    refresh every 0.5 s and may not have read it yet), are served over REST
    and gRPC: a request that finds no worker reads the heartbeats once more
    before answering 503."""
    process = server.start_worker("cuda:3", name="late-cuda3", args=("--no-control",))
    client = redis.Redis.from_url(REDIS_URL)
    try:
        assert wait_for(lambda: any(client.scan_iter(f"modelhost:worker:infer.cuda3:*-{process.pid}")), timeout=60)
        for module, url in ((httpclient, server.http_url), (grpcclient, server.grpc_url)):
            for _ in range(2):  # every front-end process (2 of each) meets it at once, one by one
                x, y = _affine(module.InferenceServerClient(url), module, "on_gpu3")
                np.testing.assert_allclose(y, x + 1)
        assert _loaded(server, "late-cuda3", "on_gpu3")
    finally:
        server.worker_processes.pop("late-cuda3")
        server.worker_devices.pop("late-cuda3")
        process.terminate()
        process.wait(20)


HELD = 6  # requests in flight on the worker when it is killed


def _metric(server: LiveServer, name: str, **labels) -> float | None:
    """The value of the series ``name`` whose labels include ``labels`` on /metrics (None: absent)."""
    import urllib.request

    text = urllib.request.urlopen(f"http://{server.http_url}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line.split("}")[0] for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_killed_worker_under_load_answers_every_held_request_and_a_restart_serves_again(server):
    """Several requests in flight to the cuda:0 worker (one running there per
    HTTP process, the others waiting for their turn at the front end's
    fair-share gate: its seats are the model's one instance), kill -9: every
    one answers 503 within 10 s, none hangs (those on the worker: it stopped
    before answering; those still waiting: it cannot be reached, or no live
    worker); the CPU worker
    keeps serving; a restarted worker serves again without restarting the
    front end."""
    http = httpclient.InferenceServerClient(server.http_url)
    outcomes: list[dict] = []

    def slow_request():
        inputs = [httpclient.InferInput("x", [1, 256], "FP32"), httpclient.InferInput("n", [], "INT64")]
        inputs[0].set_data_from_numpy(np.ones((1, 256), dtype=np.float32))
        inputs[1].set_data_from_numpy(np.array(3_000_000, dtype=np.int64))  # ~12 s each on the cuda:0 worker
        outcome: dict = {}
        try:
            httpclient.InferenceServerClient(server.http_url, network_timeout=60).infer("slow", inputs)
            outcome["result"] = "answered"
        except InferenceServerException as exc:
            outcome["result"] = (exc.status(), exc.message())
        outcome["ended"] = time.monotonic()
        outcomes.append(outcome)

    threads = [threading.Thread(target=slow_request) for _ in range(HELD)]
    for thread in threads:
        thread.start()
    log = server.worker_log_path("cuda:0")
    assert wait_for(lambda: "loaded slow/" in log.read_text())
    # /metrics: the queue depth the workers' heartbeats report, and the worker's busy fraction.
    assert wait_for(lambda: (_metric(server, "modelhost_worker_queue_depth", queue="infer.cuda0") or 0) >= 1, 5)
    assert wait_for(lambda: (_metric(server, "modelhost_worker_busy_fraction", queue="infer.cuda0") or 0) > 0, 5)
    assert _metric(server, "modelhost_workers", queue="infer.cuda0") == 1
    server.worker_processes["cuda:0"].send_signal(signal.SIGKILL)
    killed = time.monotonic()
    # Others are unaffected while it is gone.
    for _ in range(5):
        x, y = _affine(http, httpclient, "on_cpu")
        np.testing.assert_allclose(y, 3 * x)
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads), "a held request hangs"
    assert len(outcomes) == HELD
    for outcome in outcomes:
        assert outcome["result"][0] == "503", outcome
        reasons = ("stopped before answering", "no live worker", "cannot connect to the infer.cuda0 worker")
        assert any(why in outcome["result"][1] for why in reasons), outcome
        # Its connection closed with it: answered at once, not at the request's 30 s deadline.
        assert outcome["ended"] - killed < 10, outcome
    assert any("stopped before answering" in outcome["result"][1] for outcome in outcomes), outcomes
    with pytest.raises(InferenceServerException) as info:
        _affine(http, httpclient, "on_gpu")
    assert info.value.status() == "503"
    assert wait_for(lambda: _metric(server, "modelhost_workers", queue="infer.cuda0") is None, timeout=10)
    server.start_worker("cuda:0")
    server.wait_for_workers(("cuda:0",))
    x, y = _affine(http, httpclient, "on_gpu")  # the same front end, no restart
    np.testing.assert_allclose(y, 2 * x + 1)


def test_gpu_numbers_are_per_host(server):
    """``gpus: [0]`` means GPU 0 of whichever host serves it: two more
    (fake) hosts, host-b with only GPU 1 and host-c with GPU 0. A model on
    GPU 0 goes to the cuda:0 workers of this host and of host-c, never to
    host-b; a model on GPU 1 only to host-b."""
    extra = {"host-b-cuda1": ("cuda:1", "host-b"), "host-c-cuda0": ("cuda:0", "host-c")}
    for name, (device, host) in extra.items():
        server.start_worker(device, name=name, args=("--hostname", host, "--no-control"))
    try:
        server.wait_for_workers(tuple(extra))
        http = httpclient.InferenceServerClient(server.http_url)
        for _ in range(8):  # round robin (per front-end process) over the two cuda:0 workers
            x, y = _affine(http, httpclient, "on_gpu")
            np.testing.assert_allclose(y, 2 * x + 1)
            x, y = _affine(http, httpclient, "on_gpu1")
            np.testing.assert_allclose(y, 2 - x)
        assert _loaded(server, "host-c-cuda0", "on_gpu") and _loaded(server, "cuda:0", "on_gpu")
        assert not _loaded(server, "host-b-cuda1", "on_gpu")
        assert _loaded(server, "host-b-cuda1", "on_gpu1")
        for name in ("cpu", "cuda:0", "host-c-cuda0"):
            assert not _loaded(server, name, "on_gpu1")
    finally:
        for name in extra:
            process = server.worker_processes.pop(name)
            server.worker_devices.pop(name)
            process.terminate()
            process.wait(20)


def test_new_and_retired_versions_reach_the_workers(server, repository):
    http = httpclient.InferenceServerClient(server.http_url)
    for _ in range(4):
        x, y = _affine(http, httpclient, "growing")
        np.testing.assert_allclose(y, x + 1)
    m.write_model(repository, "growing", m.affine(1.0, 2.0), version=2)
    done = manage(server, "import_repository", str(repository))
    assert "created   growing/2 -> version 2" in done.stdout, done.stdout + done.stderr

    def serves_v2():
        x, y = _affine(http, httpclient, "growing")
        return np.allclose(y, x + 2)

    assert wait_for(serves_v2)
    logs = server.worker_log_path("cpu").read_text() + server.worker_log_path("cuda:0").read_text()
    assert wait_for(
        lambda: (
            "unloaded growing version 1 (no longer serving)"
            in server.worker_log_path("cpu").read_text() + server.worker_log_path("cuda:0").read_text()
        )
    ), logs
    manage(server, "delete_version", "growing", "2")
    assert wait_for(
        lambda: np.allclose(_affine(http, httpclient, "growing")[1], _affine(http, httpclient, "growing")[0] + 1)
    )


def _accumulate(client, value: int, sequence_id, start: bool = False):
    """("ok", OUTPUT) of one request of an ``acc`` sequence, or (status, message)."""
    module = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    inp = module.InferInput("INPUT", [1, 1], "INT32")
    inp.set_data_from_numpy(np.full((1, 1), value, dtype=np.int32))
    try:
        result = client.infer("acc", [inp], sequence_id=sequence_id, sequence_start=start)
    except InferenceServerException as exc:
        return (str(exc.status()), exc.message())
    return ("ok", int(result.as_numpy("OUTPUT")[0][0]))


def test_a_sequence_sticks_to_its_worker_and_a_lost_one_is_named(server):
    """Sequences of a model both workers serve, interleaved over REST (the
    front end waits in a thread) and gRPC (on its event loop): each sticks
    to the worker holding its state (round robin would send every other
    request to the other worker: "START flag" errors). The cuda:0 worker
    killed: its sequences' next requests answer 503 naming the lost
    sequence, also once its heartbeat expired, never a fresh state on the
    cpu worker; the others go on intact; a new START serves again."""
    clients = {
        "http": httpclient.InferenceServerClient(server.http_url),
        "grpc": grpcclient.InferenceServerClient(server.grpc_url),
    }
    # Rendezvous hashing places each sequence on either worker, 1 in 2: with 24 per transport, the chance
    # that one transport has none on cuda:0 (and the kill tests nothing for it) is 2^-24 (with 12: a CI run).
    ids = {"http": list(range(1, 25)), "grpc": [f"g-{i}" for i in range(24)]}
    rng = np.random.default_rng(5)
    sums = {}
    for step in range(3):
        for transport, sequence_ids in ids.items():
            for sid in sequence_ids:
                value = int(rng.integers(-100, 100))
                sums[sid] = (0 if step == 0 else sums[sid]) + value
                assert _accumulate(clients[transport], value, sid, start=step == 0) == ("ok", sums[sid]), sid
    killed = server.worker_processes["cuda:0"]
    worker_id = f"{socket.gethostname()}-{killed.pid}"
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    try:
        lost, kept = [], []
        for transport, sequence_ids in ids.items():
            for sid in sequence_ids:
                status, answer = _accumulate(clients[transport], 1, sid)
                if status == "ok":
                    sums[sid] += 1
                    assert answer == sums[sid], sid  # the cpu worker's sequences go on, state intact
                    kept.append(sid)
                    continue
                assert status in ("503", "StatusCode.UNAVAILABLE"), (sid, status, answer)
                quoted = f'"{sid}"' if isinstance(sid, str) else str(sid)
                assert f"sequence {quoted} of model 'acc' was lost: the infer.cuda0 worker {worker_id} " in answer
                assert "start the sequence again (sequence_start)" in answer
                lost.append((transport, sid))
        assert kept and {t for t, _ in lost} == {"http", "grpc"}, (lost, kept)
        assert wait_for(lambda: _metric(server, "modelhost_workers", queue="infer.cuda0") is None, timeout=10)
        time.sleep(0.6)  # every front-end process refreshed its directory
        for transport, sid in lost:  # its heartbeat is gone too: still the lost error
            status, answer = _accumulate(clients[transport], 1, sid)
            assert status != "ok" and "was lost" in answer and "heartbeat is gone" in answer, (sid, answer)
        transport, sid = lost[0]
        assert _accumulate(clients[transport], 9, sid, start=True) == ("ok", 9)  # a new START: the cpu worker
        assert _accumulate(clients[transport], 1, sid) == ("ok", 10)
    finally:  # the later tests of the module want both workers
        server.start_worker("cuda:0")
        server.wait_for_workers(("cuda:0",))


def test_redis_unreachable_at_start_up(repository, tmp_path):
    closed = f"redis://127.0.0.1:{free_port()}/0"
    env = dict(
        os.environ, VAR_DIR=str(tmp_path), INFERENCE_EXECUTOR="workers", REDIS_URL=closed,
        SECRET_KEY=secrets.token_urlsafe(50),
    )  # fmt: skip
    env.pop("DATABASE_URL", None)
    for args in (
        ["serve", "--model-repository", str(repository), "--http-port", str(free_port())],
        ["runworker", "--device", "cpu"],
    ):
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode != 0
        assert "unreachable" in done.stderr, done.stderr
        assert time.monotonic() - started < 30
    bad = subprocess.run(
        [sys.executable, "manage.py", "runworker", "--device", "tpu:0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "unknown device 'tpu:0'" in bad.stderr


@pytest.fixture
def private_redis(tmp_path):
    """A Redis of our own, so the test can stop it without disturbing others."""
    port = free_port()
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    args = [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(tmp_path),
    ]

    def start():
        process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=port)
        assert wait_for(lambda: _pings(client), timeout=10)
        return process

    state = {"process": start(), "start": start, "port": port}
    yield state
    state["process"].terminate()
    state["process"].wait()


def _pings(client) -> bool:
    try:
        return client.ping()
    except redis.RedisError:
        return False


def test_redis_going_away_mid_run(repository, tmp_path, private_redis):
    """Inference goes over the workers' own connections: with Redis gone,
    requests keep being answered (only new workers and heartbeats wait for
    it), and everything carries on when it returns."""
    url = f"redis://127.0.0.1:{private_redis['port']}/0"
    live = LiveServer(
        repository, tmp_path / "live", extra_env={"INFERENCE_EXECUTOR": "workers", "REDIS_URL": url}, devices=("cpu",)
    )
    live.start()
    try:
        live.wait_for_workers()
        http = httpclient.InferenceServerClient(live.http_url)
        grpc_c = grpcclient.InferenceServerClient(live.grpc_url)
        x, y = _affine(http, httpclient, "anywhere")
        np.testing.assert_allclose(y, x + 5)
        private_redis["process"].kill()
        private_redis["process"].wait()
        ended = time.monotonic() + 6  # past the heartbeat's expiry
        while time.monotonic() < ended:
            for client, module in ((http, httpclient), (grpc_c, grpcclient)):
                x, y = _affine(client, module, "anywhere")
                np.testing.assert_allclose(y, x + 5)
            time.sleep(0.2)
        assert http.is_server_live() and live.worker_processes["cpu"].poll() is None
        private_redis["process"] = private_redis["start"]()
        time.sleep(2)
        x, y = _affine(http, httpclient, "anywhere")
        np.testing.assert_allclose(y, x + 5)
        # The logs: per process one line when Redis went away and one when it came back; no traceback.
        front, worker = live.log(), live.worker_log_path("cpu").read_text()
        went = front.count("Redis (the workers' heartbeats) is unreachable: ConnectionError")
        assert 1 <= went <= 4 and front.count("Redis (the workers' heartbeats) recovered after") == went, front
        assert "Traceback" not in front and " left: its heartbeat ended" not in front, front
        assert worker.count("Redis (this worker's heartbeat) is unreachable") == 1, worker
        assert worker.count("Redis (this worker's heartbeat) recovered after") == 1, worker
    finally:
        assert live.stop() == 0


def test_redis_going_away_as_a_worker_starts(repository, tmp_path, private_redis):
    """Redis goes away the moment a new worker's heartbeat appears (after its
    start-up check, before Celery's consumer connects): the worker that has
    announced itself stays up, and its Celery consumer connects when Redis is
    back (with Celery's start-up retry off it shut down, draining), and it
    serves. (A front end that had not read the heartbeat before Redis went
    knows no worker meanwhile: 503; test_redis_going_away_mid_run serves
    through an outage.)"""
    from inference.workers.placement import HEARTBEAT_PREFIX

    url = f"redis://127.0.0.1:{private_redis['port']}/0"
    live = LiveServer(
        repository, tmp_path / "live", extra_env={"INFERENCE_EXECUTOR": "workers", "REDIS_URL": url}, devices=("cpu",)
    )
    client = redis.Redis.from_url(url)
    live.start()
    try:
        assert wait_for(lambda: any(client.scan_iter(f"{HEARTBEAT_PREFIX}*")), timeout=120, interval=0.01)
        private_redis["process"].kill()
        private_redis["process"].wait()
        time.sleep(5)
        worker = live.worker_processes["cpu"]
        assert worker.poll() is None, live.worker_log_path("cpu").read_text()
        private_redis["process"] = private_redis["start"]()
        live.wait_for_workers()
        assert wait_for(lambda: _celery_consumes(url), timeout=30, interval=0.5)
        http = httpclient.InferenceServerClient(live.http_url)
        x, y = _affine(http, httpclient, "anywhere")
        np.testing.assert_allclose(y, x + 5)
        assert worker.poll() is None and "Shutting down" not in live.worker_log_path("cpu").read_text()
    finally:
        assert live.stop() == 0


def _celery_consumes(url: str) -> bool:
    """Whether a Celery worker connected to the broker at ``url`` answers a
    broadcast ping (its consumer is connected)."""
    from celery import Celery

    app = Celery(broker=url)
    try:
        return bool(app.control.ping(timeout=1.0))
    finally:
        app.close()


def test_container_health_checks(server):
    """The health commands docker-compose.yml uses, against live processes."""
    assert manage(server, "worker_health", "--device", "cpu").returncode == 0
    assert manage(server, "worker_health", "--device", "cuda:0").returncode == 0
    missing = manage(server, "worker_health", "--device", "cuda:5")
    assert missing.returncode != 0 and "no heartbeat for cuda:5" in missing.stderr
    assert manage(server, "grpc_health", "--port", str(server.grpc_port)).returncode == 0
    closed = manage(server, "grpc_health", "--port", str(free_port()), "--timeout", "1")
    assert closed.returncode != 0 and "UNAVAILABLE" in closed.stderr


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_a_killed_worker_s_requests_go_once_more_to_another_worker_of_the_device(tmp_path, transport):
    """Two workers on the cpu device, 8 slow requests in flight (spread by
    round robin), kill -9 one: the requests it held (their connections
    closed before any byte of an answer) go once more to the other worker,
    so all 8 answer correctly, each answered and counted once (executions
    == answers, no failure), and the front end keeps serving. Over REST the
    front end waits in a thread; over gRPC on its event loop."""
    repo = tmp_path / "repo"
    m.write_model(repo, "slow", m.slow_loop(), config="instance_group [ { kind: KIND_CPU count: 2 } ]\n")
    url = REDIS_URL.rsplit("/", 1)[0] + "/" + str(int(REDIS_URL.rsplit("/", 1)[1]) + 1)
    redis.Redis.from_url(url).flushdb()
    live = LiveServer(repo, tmp_path / "live", extra_env={"INFERENCE_EXECUTOR": "workers", "REDIS_URL": url})
    live.start()
    workers = {}
    try:
        for host in ("host-a", "host-b"):
            log = open(live.var_dir / f"{host}.log", "wb")
            workers[host] = subprocess.Popen(
                [sys.executable, "manage.py", "runworker", "--device", "cpu", "--hostname", host],
                cwd=ROOT, env=live.env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        client = redis.Redis.from_url(url)
        assert wait_for(lambda: len(list(client.scan_iter("modelhost:worker:infer.cpu:*"))) == 2, timeout=60)
        time.sleep(1.0)  # the front ends refresh their directory every 0.5 s
        x = np.ones((1, 256), dtype=np.float32)
        n = np.array(250_000, dtype=np.int64)
        session = __import__("onnxruntime").InferenceSession(m.slow_loop(), providers=["CPUExecutionProvider"])
        expected = session.run(None, {"x": x, "n": n})[0]
        http = httpclient.InferenceServerClient(live.http_url)
        np.testing.assert_allclose(_slow(http, x, np.array(1, dtype=np.int64))[1], _tanh_step(x), atol=1e-6)
        outcomes: list = [None] * 8

        def request(i):
            if transport == "grpc":
                c = grpcclient.InferenceServerClient(live.grpc_url)
            else:
                c = httpclient.InferenceServerClient(live.http_url, network_timeout=60)
            try:
                outcomes[i] = ("ok", _slow(c, x, n)[1], time.monotonic())
            except InferenceServerException as exc:
                outcomes[i] = (exc.status(), exc.message(), time.monotonic())

        threads = [threading.Thread(target=request, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
            time.sleep(0.02)
        time.sleep(0.5)
        workers["host-a"].send_signal(signal.SIGKILL)
        # (its connections close: the requests it held go to host-b)
        for t in threads:
            t.join(60)
        assert all(o is not None and o[0] == "ok" for o in outcomes), outcomes
        for _, y, _ in outcomes:
            np.testing.assert_allclose(y, expected, rtol=1e-5)
        log = (live.var_dir / "host-a.log").read_text()
        assert "drain" not in log  # killed, not drained: its requests went again because their connections closed
        # The survivor serves every new request; the killed one is passed over.
        for _ in range(4):
            np.testing.assert_allclose(_slow(http, x, np.array(1, dtype=np.int64))[1], _tanh_step(x), atol=1e-6)

        def executions():
            (stats,) = http.get_inference_statistics("slow")["model_stats"]
            return int(stats["execution_count"]), int(stats["inference_stats"]["fail"]["count"])

        expected_counts = (1 + 8 + 4, 0)  # warm-up, the 8, the 4 after the kill; each counted once
        assert wait_for(lambda: executions() == expected_counts, timeout=10), (executions(), expected_counts)
    finally:
        for process in workers.values():
            process.kill()
            process.wait()
        assert live.stop() == 0


def _slow(client, x, n):
    module = grpcclient if isinstance(client, grpcclient.InferenceServerClient) else httpclient
    inputs = [module.InferInput("x", [1, 256], "FP32"), module.InferInput("n", [], "INT64")]
    inputs[0].set_data_from_numpy(x)
    inputs[1].set_data_from_numpy(n)
    return x, client.infer("slow", inputs).as_numpy("y")


def _tanh_step(x):
    """One iteration of the slow model, computed with numpy from its weights."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load_from_string(m.slow_loop())
    weight = next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == "W")
    return np.tanh(x @ weight)
