"""Worker pieces without processes: the frames of the worker transport,
execution providers per device, placement, instances per device."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from inference.protocol.datatypes import BY_NAME
from inference.protocol.errors import InvalidInput
from inference.serving.instance_groups import allowed_devices, cpu_instances, instances_on
from inference.workers import frames, messages
from inference.workers.placement import (
    DeviceError,
    DeviceUnavailable,
    device_name,
    device_of,
    parse_device,
    providers_for,
    queue_for,
)
from tests.support.onnx_models import ALL_DATATYPES, expected_identity_input

NUMERIC = [d for d in ALL_DATATYPES if d != "BYTES"]


def _request(**fields) -> messages.RunRequest:
    base = {"model": "m", "version": 3, "sha256": "s", "outputs": ["y"], "rows": 1, "deadline": 1.5}
    return messages.RunRequest(**{**base, **fields})


def _round_trip(request: messages.RunRequest, tensors: list) -> tuple[messages.RunRequest, dict]:
    """Send one frame through a real socket pair; the message and tensors received."""
    a, b = socket.socketpair()
    with a, b:
        sender = threading.Thread(target=frames.send, args=(a, frames.encode(request, tensors)))
        sender.start()
        got, body = frames.Reader(b, 1 << 30, messages.to_worker).frame()
        sender.join()
    return got, frames.tensors(got, body)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_frames_round_trip_numeric(data):
    name = data.draw(st.sampled_from(NUMERIC))
    dtype = BY_NAME[name].numpy
    array = data.draw(hnp.arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)))
    request, tensors = _round_trip(_request(), [("x", array)])
    assert request.outputs == ["y"] and request.deadline == 1.5 and request.version == 3
    out = tensors["x"]
    assert out.dtype == dtype and out.shape == array.shape
    assert out.tobytes() == array.tobytes()  # bit for bit (NaN payloads included)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(max_size=20), max_size=12))
def test_frames_round_trip_bytes(items):
    array = np.empty(len(items), dtype=object)
    array[:] = items
    _, tensors = _round_trip(_request(), [("t", array.reshape(len(items), 1) if items else array)])
    assert [bytes(x) for x in tensors["t"].reshape(-1)] == items


def test_frames_are_raw_little_endian_aligned_views():
    x = np.array([[1.0, 2.0]], dtype=">f4")  # big-endian in, little-endian on the wire
    image = np.arange(3 * 224 * 224, dtype=np.float32).reshape(1, 3, 224, 224)
    tensors = [("x", x), ("odd", np.arange(3, dtype=np.int8)), ("image", image)]
    buffers = frames.encode(_request(), tensors)
    joined = b"".join(bytes(b) for b in buffers)
    assert np.array([1.0, 2.0], dtype="<f4").tobytes() in joined
    assert len(buffers) >= 5  # the image is sent from its own memory, not copied into one message
    assert len(frames.views(buffers, tls=True)) == 2  # over TLS the small pieces go as one record run
    _, received = _round_trip(_request(), tensors)
    assert received["x"].dtype == np.dtype("<f4")
    np.testing.assert_array_equal(received["image"], image)
    assert received["image"].ctypes.data % 16 == 0  # aligned: ONNX Runtime uses it in place
    assert received["image"].base is not None  # a view of the received frame


@pytest.mark.parametrize("datatype", ALL_DATATYPES)
def test_frames_every_datatype(datatype):
    data = expected_identity_input(datatype, (2, 3))
    _, tensors = _round_trip(_request(), [("t", data)])
    if datatype == "BYTES":
        assert list(tensors["t"].flat) == list(data.flat)
    else:
        np.testing.assert_array_equal(tensors["t"], data)


def test_frames_refuse_what_does_not_fit():
    a, b = socket.socketpair()
    with a, b:
        frames.send(a, frames.encode(_request(), [("t", np.zeros(1000, dtype=np.float32))]))
        with pytest.raises(frames.FrameError, match="over the limit"):
            frames.Reader(b, 1000, messages.to_worker).frame()  # a frame over the limit is refused before it is read
    body = memoryview(bytes(64))

    def tensor(*info):
        return _request(tensors=[messages.TensorInfo(*info)])

    with pytest.raises(InvalidInput, match="8 bytes for 10"):
        frames.tensors(tensor("t", "<f4", [10], 0, 8), body)  # 10 floats in 8 bytes
    with pytest.raises(InvalidInput, match="outside the frame"):
        frames.tensors(tensor("t", "<f4", [1000], 0, 4000), body)
    with pytest.raises(InvalidInput):
        frames.tensors(tensor("t", "|O", [1], 0, 8), body)  # objects never come from bytes
    with pytest.raises(InvalidInput, match="unknown dtype"):
        frames.tensors(tensor("t", "not a dtype", [1], 0, 8), body)


@pytest.mark.parametrize(
    "header",
    [
        {"type": "run", "model": "m", "version": 1, "sha256": "s", "outputs": [], "rows": 1, "deadline": 1.0,
         "tensors": [["t", "<f4", [-1], 0, 4]]},  # a negative dimension
        {"type": "run", "model": "m", "version": "1", "sha256": "s", "outputs": [], "rows": 1, "deadline": 1.0},
        {"type": "run", "model": "m", "version": 1, "sha256": "s", "outputs": "y", "rows": 1, "deadline": 1.0},
        {"type": "run", "model": "m", "version": 1, "sha256": "s", "outputs": [], "rows": -2, "deadline": 1.0},
        {"type": "shared", "size": 0},
        {"type": "launch", "what": "missiles"},
        [1, 2, 3],
    ],
)  # fmt: skip
def test_malformed_headers_are_invalid_argument_and_the_stream_stays_in_step(header):
    """A whole frame whose header is not a message the receiver takes raises
    BadHeader (answered INVALID_ARGUMENT), and the next frame reads fine."""
    import msgspec

    a, b = socket.socketpair()
    with a, b:
        head = msgspec.msgpack.encode(header)
        a.sendall(frames.PREFIX.pack(frames.PREFIX.size + len(head) - 4, len(head)) + head)
        frames.send(a, frames.encode(_request(), [("x", np.ones(2, np.float32))]))
        reader = frames.Reader(b, 1 << 20, messages.to_worker)
        with pytest.raises(frames.BadHeader) as caught:
            reader.frame()
        assert caught.value.code == "INVALID_ARGUMENT"
        request, body = reader.frame()
        np.testing.assert_array_equal(frames.tensors(request, body)["x"], np.ones(2, np.float32))


def test_instances_per_device():
    assert instances_on("cpu", ()) == 1
    assert instances_on("cpu", (), cpu_default=4) == 4  # a CPU worker fills its cores without a group
    assert instances_on("cuda:0", (), cpu_default=4) == 1  # a GPU runs one session's kernels
    assert instances_on("cpu", [{"kind": "KIND_CPU", "count": 1}], cpu_default=4) == 1  # the config's count wins
    assert instances_on("cpu", [{"kind": "KIND_CPU", "count": 3}]) == 3
    assert instances_on("cuda:0", [{"kind": "KIND_CPU", "count": 3}]) == 1
    gpu = [{"kind": "KIND_GPU", "count": 2, "gpus": [1]}]
    assert instances_on("cuda:1", gpu) == 2 and instances_on("cuda:0", gpu) == 1
    assert instances_on("cuda:0", [{"kind": "KIND_AUTO", "count": 4}]) == 4


def test_providers_per_device():
    assert providers_for("cpu") == ["CPUExecutionProvider"]
    with pytest.raises(DeviceUnavailable, match="CUDAExecutionProvider"):
        providers_for("cuda:1")  # this machine's onnxruntime has no CUDA provider
    assert providers_for("cuda:1", fallback_to_cpu=True) == ["CPUExecutionProvider"]
    with pytest.raises(DeviceError):
        providers_for("gpu")


def test_devices_queues_and_placement():
    assert parse_device("cuda:2") == ("cuda", 2) and parse_device(" CPU ") == ("cpu", None)
    assert queue_for("cuda:12") == "infer.cuda12" and queue_for("cpu") == "infer.cpu"
    assert device_of("infer.cuda12") == "cuda:12" == device_name(" CUDA:12") and device_of("infer.cpu") == "cpu"
    for bad in ("cuda", "cuda:-1", "cuda:x", "tpu:0", ""):
        with pytest.raises(DeviceError):
            parse_device(bad)
    live = {"cpu", "cuda:0", "cuda:1", "cuda:10"}
    assert allowed_devices([], live) == ["cuda:0", "cuda:1", "cuda:10"]  # KIND_AUTO: the GPUs while any is live
    assert allowed_devices([], {"cpu"}) == ["cpu"]
    assert allowed_devices([{"kind": "KIND_GPU", "gpus": [1, 3]}], live) == ["cuda:1"]
    assert allowed_devices([{"kind": "KIND_GPU", "gpus": []}], live) == ["cuda:0", "cuda:1", "cuda:10"]
    assert allowed_devices([{"kind": "KIND_CPU"}], live) == ["cpu"]
    assert allowed_devices([{"kind": "KIND_GPU", "gpus": [3]}], live) == []
    assert allowed_devices([{"kind": "KIND_CPU"}, {"kind": "KIND_GPU", "gpus": [0]}], live) == ["cpu", "cuda:0"]


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_busy_meter_averages_instances_in_use_over_its_window():
    from inference.workers.server.runtime import BusyMeter

    clock = _Clock()
    meter = BusyMeter(window=10.0, clock=clock)
    assert meter.fraction() == 0.0
    a, b = ("a", 1, "x"), ("b", 1, "y")
    meter.begin(a, 2)  # one of a's two instances: 0.5
    clock.now += 4
    meter.begin(a, 2)  # both: 1.0
    clock.now += 2
    meter.begin(a, 2)  # a third request waits for an instance: still 1.0
    clock.now += 2
    for _ in range(3):
        meter.end(a)
    clock.now += 2  # idle
    assert meter.fraction() == pytest.approx((4 * 0.5 + 2 * 1.0 + 2 * 1.0) / 10)
    meter.begin(b, 1)
    meter.begin(a, 4)  # a: 1 of 4, b: 1 of 1 -> 2 of 5
    clock.now += 10
    assert meter.fraction() == pytest.approx(0.4, abs=0.01)  # the last 10 s only
    meter.end(a), meter.end(b)
    clock.now += 30
    assert meter.fraction() == 0.0


def test_cache_janitor_drops_what_left_the_registry(tmp_path):
    import os
    import time
    from types import SimpleNamespace

    from models_store.serving import CacheJanitor

    def snapshot(*versions):
        return {"m": SimpleNamespace(versions={i: v for i, v in enumerate(versions)})}

    def version(sha):
        return SimpleNamespace(sha256=sha, artifact=f"m/{sha}/model.onnx")

    for name in ("a", "b", "stale", ".fetch-old", ".fetch-new", "young"):
        (tmp_path / name).mkdir()
    old = time.time() - 7200
    for name in ("a", "b", "stale", ".fetch-old"):
        os.utime(tmp_path / name, (old, old))
    janitor = CacheJanitor(tmp_path, "sha256", min_age=600)
    janitor.on_snapshot(snapshot(version("a"), version("b")))  # start: old leftovers go
    assert sorted(p.name for p in tmp_path.iterdir()) == [".fetch-new", "a", "b", "young"]
    janitor.on_snapshot(snapshot(version("a"), version("c")))  # b deleted; c is new (not fetched yet)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".fetch-new", "a", "young"]
    store = tmp_path / "store"
    for name in ("a", "gone"):
        (store / "m" / name).mkdir(parents=True)
        os.utime(store / "m" / name, (old, old))
    local = CacheJanitor(store, "store")
    local.on_snapshot(snapshot(version("a")))  # start: the old copy no version uses goes, the used one stays
    assert sorted(p.name for p in (store / "m").iterdir()) == ["a"]
    local.on_snapshot(snapshot())
    assert not (store / "m").exists()  # the model directory went with its last artifact


class _EchoWorker:
    """A real WorkerServer on a Unix socket whose handler answers the sum of
    each received tensor (as a tensor per input) and whether it came through
    shared memory (the answer's batch: 1 shared, 0 not)."""

    def __init__(self, tmp_path, max_frame: int = 1 << 30):
        from inference.workers.server.socket_server import WorkerServer

        self.path = str(tmp_path / "worker.sock")
        self.server = WorkerServer(self.handle, worker_id="echo-1", device="cpu", max_frame=max_frame,
                                   unix_path=self.path)  # fmt: skip
        self.server.start()

    def handle(self, request, body, shared=None):
        try:
            tensors = frames.tensors(request, body, "request", shared)
        except InvalidInput as exc:
            return frames.encode(messages.ErrorAnswer(exc.code, exc.message))
        sums = [
            (name, np.array([np.asarray(t, dtype=np.float64).sum()]))
            for name, t in tensors.items()
            if t.dtype.kind != "O"
        ]
        return frames.encode(messages.RunAnswer(int(request.shared), True, 0, 0), sums)

    def connect(self):
        from inference.workers.client.connections import Connection

        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(self.path)
        conn = Connection(sock, None, 1 << 30)
        hello, _ = conn.reader.frame()
        assert hello == messages.Hello("echo-1", "cpu")
        return conn

    def ask(self, conn, feeds):
        frames.send_views(conn.sock, conn.encode(_request(), feeds))
        answer, body = conn.reader.frame()
        if isinstance(answer, messages.ErrorAnswer):
            return answer.message
        sums = {name: float(t[0]) for name, t in frames.tensors(answer, body).items()}
        return {"sums": sums, "shared": bool(answer.batch)}


def test_large_tensors_go_through_shared_memory_on_one_machine(tmp_path):
    worker = _EchoWorker(tmp_path)
    conn = worker.connect()
    small = np.arange(16, dtype=np.float32).reshape(1, 16)
    image = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)  # 602,112 bytes
    answer = worker.ask(conn, {"x": small})
    assert answer == {"sums": {"x": 120.0}, "shared": False}  # small: inline
    assert conn.shared is None
    for scale in (1.0, 2.0, -3.0):  # the same shared memory, rewritten per request
        answer = worker.ask(conn, {"image": image * scale, "x": small})
        assert answer["shared"] is True
        assert answer["sums"]["image"] == pytest.approx(float(image.astype(np.float64).sum()) * scale, rel=1e-6)
        assert answer["sums"]["x"] == 120.0
    assert conn.shared.size == 1 << 20
    big = np.ones((3, 1 << 20), dtype=np.float32)  # 12 MiB: a larger one is announced first
    assert worker.ask(conn, {"big": big}) == {"sums": {"big": float(3 << 20)}, "shared": True}
    assert conn.shared.size == 12 << 20
    huge = np.ones((5, 1 << 20), dtype=np.float32)  # 20 MiB, over SHARED_MAX: through the socket
    assert worker.ask(conn, {"huge": huge}) == {"sums": {"huge": float(5 << 20)}, "shared": False}
    assert conn.shared.size == 12 << 20
    words = np.array([b"a", b"bc"], dtype=object)  # BYTES: through the socket, with everything else
    answer = worker.ask(conn, {"image": image, "words": words})
    assert answer["shared"] is False
    assert answer["sums"]["image"] == pytest.approx(float(image.astype(np.float64).sum()), rel=1e-6)


def test_shared_memory_the_worker_refused_fails_the_request_clearly(tmp_path):
    worker = _EchoWorker(tmp_path, max_frame=1 << 20)  # memory over the frame limit is refused
    conn = worker.connect()
    conn.reader.limit = 4 << 20  # a front end configured with a larger limit
    answer = worker.ask(conn, {"x": np.ones((2 << 20) // 4, dtype=np.float32)})
    assert answer == "request: its tensors are in shared memory this connection does not have"
    assert worker.ask(conn, {"x": np.ones(4, dtype=np.float32)}) == {"sums": {"x": 4.0}, "shared": False}
    with pytest.raises(InvalidInput, match="shared memory this connection does not have"):
        frames.tensors(
            _request(tensors=[messages.TensorInfo("t", "<f4", [1], 0, 4)], shared=True), memoryview(bytes(64))
        )


def test_cpu_instances_are_the_cores_this_process_may_use_per_session_threads(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3, 4})
    assert cpu_instances(1) == 5 and cpu_instances(2) == 2 and cpu_instances(8) == 1
