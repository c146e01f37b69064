"""The OIP gRPC server of a live ``serve``: tritonclient.grpc for every datatype,
hand-built requests (raw and typed contents, built with tritonclient's own
protobuf messages), status codes, concurrency, and cross-process visibility.

This process never imports the server's own ``inference.grpc.proto`` stubs:
tritonclient registers the same ``inference.*`` message names.
"""

from __future__ import annotations

import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from django.core.management import CommandError, call_command
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

from bench import worker_cost
from tests.support import onnx_models as m
from tests.support.live import wait_for
from tests.support.onnx_models import ALL_DATATYPES, expected_identity_input
from tests.support.server import ROOT, LiveServer

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def client(model_server):
    c = grpcclient.InferenceServerClient(model_server.grpc_url)
    yield c
    c.close()


@pytest.fixture(scope="module")
def stub(model_server):
    channel = grpc.insecure_channel(
        model_server.grpc_url,
        options=[("grpc.max_send_message_length", 200 << 20), ("grpc.max_receive_message_length", 200 << 20)],
    )
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


def _call(fn, request):
    """(status code, details) of a failing call."""
    with pytest.raises(grpc.RpcError) as info:
        fn(request)
    return info.value.code(), info.value.details()


@pytest.mark.parametrize("datatype", ALL_DATATYPES)
def test_identity_every_datatype(client, datatype):
    data = expected_identity_input(datatype, shape=(3, 2), seed=7)
    inp = grpcclient.InferInput("INPUT0", [3, 2], datatype)
    inp.set_data_from_numpy(data)
    result = client.infer(f"identity_{datatype.lower()}", [inp], request_id="g-1")
    got = result.as_numpy("OUTPUT0")
    response = result.get_response()
    assert (response.id, response.model_name, response.model_version) == (
        "g-1",
        f"identity_{datatype.lower()}",
        "1",
    )
    assert len(response.raw_output_contents) == 1  # outputs in raw contents, as Triton
    if datatype == "BYTES":
        assert list(got.flat) == list(data.flat)
    else:
        assert got.dtype == data.dtype
        np.testing.assert_array_equal(got, data)


def test_health_metadata_and_readiness(client):
    assert client.is_server_live() and client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta.name == "modelhost" and "binary_tensor_data" in meta.extensions
    model = client.get_model_metadata("affine", as_json=True)
    assert model == {
        "name": "affine",
        "versions": ["1"],
        "platform": "onnxruntime_onnx",
        "inputs": [{"name": "x", "datatype": "FP32", "shape": ["-1", "4"]}],
        "outputs": [{"name": "y", "datatype": "FP32", "shape": ["-1", "4"]}],
    }
    assert client.is_model_ready("affine") and client.is_model_ready("versioned", "1")
    assert not client.is_model_ready("broken")


def test_versions_and_output_subset(client):
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    inp = grpcclient.InferInput("x", [2, 4], "FP32")
    inp.set_data_from_numpy(x)
    assert client.infer("versioned", [inp]).get_response().model_version == "2"
    np.testing.assert_allclose(client.infer("versioned", [inp], model_version="1").as_numpy("y"), x + 1)
    a = np.ones((1, 16), dtype=np.int32)
    ins = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(a * 4)
    result = client.infer("simple", ins, outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
    assert [o.name for o in result.get_response().outputs] == ["OUTPUT1"]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - a * 4)


@pytest.mark.parametrize(
    "model,version,code,needle",
    [
        ("nope", "", "StatusCode.NOT_FOUND", "Request for unknown model: 'nope' is not found"),
        ("simple", "9", "StatusCode.NOT_FOUND", "Request for unknown model: 'simple' version 9 is not found"),
        ("broken", "", "StatusCode.UNAVAILABLE", "FAILED"),
        ("versioned", "1", None, None),
    ],
)
def test_status_codes_match_rest_messages(client, model_server, model, version, code, needle):
    x = np.zeros((1, 16), dtype=np.int32)
    ins = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    for i in ins:
        i.set_data_from_numpy(x)
    if code is None:  # versioned/1 exists but wants FP32 x: a bad input, not a lookup error
        with pytest.raises(InferenceServerException) as info:
            client.infer(model, ins, model_version=version)
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert info.value.message().startswith("expected 1 inputs but got 2 inputs for model 'versioned'")
        return
    with pytest.raises(InferenceServerException) as info:
        client.infer(model, ins, model_version=version)
    assert info.value.status() == code and needle in info.value.message()
    rest = httpclient.InferenceServerClient(model_server.http_url)
    hin = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    for i in hin:
        i.set_data_from_numpy(x)
    with pytest.raises(InferenceServerException) as rest_info:
        rest.infer(model, hin, model_version=version)
    assert rest_info.value.message() == info.value.message()  # same message on both transports


def _typed_request(datatype: str, data: np.ndarray) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=f"identity_{datatype.lower()}", id="typed")
    tensor = request.inputs.add(name="INPUT0", datatype=datatype, shape=list(data.shape))
    field = {
        "BOOL": "bool_contents",
        "INT8": "int_contents",
        "INT16": "int_contents",
        "INT32": "int_contents",
        "INT64": "int64_contents",
        "UINT8": "uint_contents",
        "UINT16": "uint_contents",
        "UINT32": "uint_contents",
        "UINT64": "uint64_contents",
        "FP32": "fp32_contents",
        "FP64": "fp64_contents",
        "BYTES": "bytes_contents",
    }[datatype]
    getattr(tensor.contents, field).extend(data.ravel().tolist())
    return request


@pytest.mark.parametrize("datatype", [d for d in ALL_DATATYPES if d != "FP16"])
def test_typed_contents_every_datatype(stub, datatype):
    data = expected_identity_input(datatype, shape=(2, 2), seed=3)
    response = stub.ModelInfer(_typed_request(datatype, data))
    assert response.id == "typed" and response.outputs[0].datatype == datatype
    raw = response.raw_output_contents[0]
    if datatype == "BYTES":
        expected = b"".join(struct.pack("<I", len(b)) + b for b in data.ravel())
        assert raw == expected
    else:
        np.testing.assert_array_equal(np.frombuffer(raw, dtype=data.dtype.newbyteorder("<")).reshape(2, 2), data)


_NUMPY = {"UINT8": "u1", "UINT16": "<u2", "UINT32": "<u4", "UINT64": "<u8", "INT8": "i1", "INT16": "<i2"}
_NUMPY.update({"INT32": "<i4", "INT64": "<i8", "FP32": "<f4", "FP64": "<f8"})


def _extremes(datatype: str) -> np.ndarray:
    """Every datatype at its limits (numpy computes them, not the server's code)."""
    if datatype == "BOOL":
        return np.array([True, False, True, True], dtype=bool)
    dtype = np.dtype(_NUMPY[datatype])
    if dtype.kind == "f":
        info = np.finfo(dtype)
        return np.array(
            [info.max, -info.max, info.tiny, info.smallest_subnormal, -info.smallest_subnormal, 0.0, -0.0, np.inf],
            dtype=dtype,
        )
    info = np.iinfo(dtype)
    return np.array(
        [info.min, info.max, info.max - 1, info.min + 1, 0, 1, info.max // 2 + 1, info.min // 2], dtype=dtype
    )


@pytest.mark.parametrize("datatype", [d for d in ALL_DATATYPES if d not in ("FP16", "BYTES")])
def test_typed_contents_are_exact_at_the_limits(stub, datatype):
    """uint64_contents values >= 2**63, INT64 min/max, FP64 subnormals...
    come back bit for bit (they must never pass through a float or a
    signed array)."""
    data = _extremes(datatype).reshape(1, -1)
    response = stub.ModelInfer(_typed_request(datatype, data))
    got = np.frombuffer(response.raw_output_contents[0], dtype=data.dtype.newbyteorder("<")).reshape(data.shape)
    assert got.tobytes() == data.astype(data.dtype.newbyteorder("<")).tobytes(), (got, data)


@pytest.mark.parametrize(
    "datatype,field,value",
    [
        ("UINT8", "uint_contents", 256),
        ("UINT16", "uint_contents", 65536),
        ("INT8", "int_contents", -129),
        ("INT16", "int_contents", 32768),
    ],
)
def test_typed_contents_out_of_range_are_refused(stub, datatype, field, value):
    request = pb.ModelInferRequest(model_name=f"identity_{datatype.lower()}")
    getattr(request.inputs.add(name="INPUT0", datatype=datatype, shape=[1, 1]).contents, field).append(value)
    code, details = _call(stub.ModelInfer, request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and f"out of range for {datatype}" in details, details


def test_raw_fp16_and_bool(stub):
    half = np.array([[1.5, -2.25]], dtype="<f2")
    request = pb.ModelInferRequest(model_name="identity_fp16")
    request.inputs.add(name="INPUT0", datatype="FP16", shape=[1, 2])
    request.raw_input_contents.append(half.tobytes())
    response = stub.ModelInfer(request)
    assert response.raw_output_contents[0] == half.tobytes()


def _raw_simple(**changes) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        request.raw_input_contents.append(np.arange(16, dtype="<i4").tobytes())
    for key, value in changes.items():
        value(request) if callable(value) else setattr(request, key, value)
    return request


BAD = [
    ("raw count", lambda r: r.raw_input_contents.pop(), "raw_input_contents has 1 entries but the request has 2"),
    (
        "raw size",
        lambda r: r.raw_input_contents.__setitem__(0, b"\x00" * 60),
        "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60",
    ),
    (
        "raw and typed",
        lambda r: r.inputs[0].contents.int_contents.extend([1] * 16),
        "contents field must not be specified when using raw_input_contents for 'INPUT0' for model 'simple'",
    ),
    ("unknown datatype", lambda r: setattr(r.inputs[0], "datatype", "FLOAT"), "unknown datatype 'FLOAT'"),
    ("negative dim", lambda r: r.inputs[0].shape.__setitem__(0, -1), "non-negative"),
    ("wrong shape", lambda r: r.inputs[0].shape.__setitem__(1, 8), "Expected 32, got 64"),
]


@pytest.mark.parametrize("name,change,needle", BAD, ids=[b[0] for b in BAD])
def test_bad_raw_requests(stub, name, change, needle):
    request = _raw_simple()
    change(request)
    code, details = _call(stub.ModelInfer, request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and needle in details, details


def test_bad_typed_requests(stub):
    data = np.arange(4, dtype=np.float32).reshape(2, 2)
    wrong_field = pb.ModelInferRequest(model_name="identity_fp32")
    wrong_field.inputs.add(name="INPUT0", datatype="FP32", shape=[2, 2]).contents.int_contents.extend([1, 2, 3, 4])
    code, details = _call(stub.ModelInfer, wrong_field)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "FP32 data goes in contents.fp32_contents, got int_contents" in details
    short = _typed_request("FP32", data)
    del short.inputs[0].contents.fp32_contents[-1]
    code, details = _call(stub.ModelInfer, short)
    assert "contents.fp32_contents has 3 elements but shape [2, 2] needs 4" in details
    fp16 = pb.ModelInferRequest(model_name="identity_fp16")
    fp16.inputs.add(name="INPUT0", datatype="FP16", shape=[1]).contents.fp32_contents.append(1.0)
    code, details = _call(stub.ModelInfer, fp16)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "FP16 data can only be sent in raw_input_contents" in details
    overflow = pb.ModelInferRequest(model_name="identity_int8")
    overflow.inputs.add(name="INPUT0", datatype="INT8", shape=[1, 1]).contents.int_contents.append(300)
    code, details = _call(stub.ModelInfer, overflow)
    assert "out of range for INT8" in details


def test_oversized_message_is_invalid_argument(stub):
    request = pb.ModelInferRequest(model_name="identity_uint8")
    size = 64 * 1024 * 1024 + 16
    request.inputs.add(name="INPUT0", datatype="UINT8", shape=[1, size])
    request.raw_input_contents.append(bytes(size))
    code, details = _call(stub.ModelInfer, request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "more than the limit" in details


def test_server_keeps_serving_after_bad_requests(client, stub):
    for _name, change, _needle in BAD:
        request = _raw_simple()
        change(request)
        _call(stub.ModelInfer, request)
    assert client.is_server_ready()
    response = stub.ModelInfer(_raw_simple())
    np.testing.assert_array_equal(np.frombuffer(response.raw_output_contents[0], "<i4"), 2 * np.arange(16))


def test_concurrent_calls_from_threads(model_server):
    """8 threads x 40 calls, each with its own data; every answer is checked."""

    def work(seed: int) -> int:
        c = grpcclient.InferenceServerClient(model_server.grpc_url)
        rng = np.random.default_rng(seed)
        for _ in range(40):
            x = rng.standard_normal((4, 4)).astype(np.float32)
            inp = grpcclient.InferInput("x", [4, 4], "FP32")
            inp.set_data_from_numpy(x)
            np.testing.assert_allclose(c.infer("affine", [inp]).as_numpy("y"), 2 * x + 1, rtol=1e-6)
        c.close()
        return seed

    with ThreadPoolExecutor(8) as pool:
        assert sorted(pool.map(work, range(8))) == list(range(8))


def _manage(model_server, *args: str) -> str:
    env = dict(model_server.env)
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_registry_changes_reach_both_processes(model_server, client, tmp_path):
    """Import, fail and delete from a third process; REST and gRPC follow without a restart."""
    rest = httpclient.InferenceServerClient(model_server.http_url)
    repo = tmp_path / "extra"
    m.write_model(repo, "late_model", m.affine(3.0, 0.0), version=1)
    m.write_model(repo, "late_model", m.affine(4.0, 0.0), version=2)
    assert "created   late_model/2 -> version 2" in _manage(model_server, "import_repository", str(repo))

    def both_serve(version: str) -> bool:
        try:
            return client.get_model_metadata("late_model").versions == [version] and rest.get_model_metadata(
                "late_model"
            )["versions"] == [version]
        except InferenceServerException:
            return False

    assert all(both_serve("2") for _ in range(6))  # at once: the import answered after every process saw it
    x = np.ones((1, 4), dtype=np.float32)
    inp = grpcclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(x)
    np.testing.assert_allclose(client.infer("late_model", [inp]).as_numpy("y"), 4 * x)
    # Version 2 fails: both fall back to version 1.
    _manage(
        model_server,
        "shell",
        "-c",
        "from models_store.registry import selectors; from tests.support.store import force_state; "
        "m = selectors.model_get('late_model'); "
        "force_state(selectors.version_get(m, 2), 'FAILED', 'marked failed by a test')",
    )
    assert all(both_serve("1") for _ in range(6))
    np.testing.assert_allclose(client.infer("late_model", [inp]).as_numpy("y"), 3 * x)
    # Version 1 is deleted: nothing serves, on either transport.
    assert "deleted late_model version 1" in _manage(model_server, "delete_version", "late_model", "1")
    assert all(not client.is_model_ready("late_model") and not rest.is_model_ready("late_model") for _ in range(6))
    with pytest.raises(InferenceServerException) as info:
        client.infer("late_model", [inp], model_version="1")
    assert info.value.status() == "StatusCode.NOT_FOUND"


def test_rungrpc_alone(model_server, tmp_path):
    """``manage.py rungrpc`` serves the same registry by itself and stops on SIGTERM."""
    from tests.support.server import free_port

    port = free_port()
    env = dict(model_server.env)
    process = subprocess.Popen(
        [sys.executable, "manage.py", "rungrpc", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        c = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
        assert wait_for(lambda: _ready(c), timeout=30)
        assert c.is_model_ready("simple")
        c.close()
    finally:
        process.terminate()
        assert process.wait(30) == 0, process.stdout.read().decode()


def _ready(c) -> bool:
    try:
        return c.is_server_ready()
    except InferenceServerException:
        return False


def _grpc_processes(server) -> list[int]:
    """The pids of the server's gRPC processes (``rungrpc``, in serve's session)."""
    return worker_cost.role_pids({server.process.pid}, "gRPC")


def _minor_faults(pids: list[int]) -> int:
    return sum(faults for _, _, faults in worker_cost.sample(pids).values())


@pytest.fixture(scope="module")
def image_server(tmp_path_factory):
    """``serve`` on a repository of the image model alone: glibc raises its
    thresholds after each large block freed, so a process's history decides
    when it trims; this one has handled nothing bigger than its requests."""
    root = tmp_path_factory.mktemp("image-repository")
    m.write_model(root, "image", m.fixed_image())
    server = LiveServer(root, tmp_path_factory.mktemp("image-live")).start()
    yield server
    server.stop()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_large_requests_reuse_the_grpc_processes_memory(image_server):
    """A CNN-sized request (FP32 [1, 3, 224, 224], 602,112 bytes of
    raw_input_contents, as grpcio's stubs and h2load send it) does not fault
    its buffers in afresh: with glibc's own trim rule a gRPC process handed
    the message's buffers back to the system after every request and
    faulted ~450 pages in again for the next; with the heaps bounded
    (hosting/composition.py: bound_heaps) it reuses them. The answers are
    numpy's channel means."""
    pids = _grpc_processes(image_server)
    assert pids, "no rungrpc process found in serve's session"
    image = np.random.default_rng(11).standard_normal((1, 3, 224, 224)).astype(np.float32)
    request = pb.ModelInferRequest(model_name="image")
    request.inputs.add(name="image", datatype="FP32", shape=list(image.shape))
    request.raw_input_contents.append(image.tobytes())
    channel = grpc.insecure_channel(image_server.grpc_url, options=[("grpc.max_send_message_length", 8 << 20)])
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)

    def infer():
        response = stub.ModelInfer(request)
        mean = np.frombuffer(response.raw_output_contents[0], dtype="<f4").reshape(1, 3)
        np.testing.assert_allclose(mean, image.mean(axis=(2, 3)), rtol=1e-5, atol=1e-6)

    try:
        for _ in range(5):  # the session loaded, the buffers grown
            infer()
        before = _minor_faults(pids)
        requests = 40
        for _ in range(requests):
            infer()
        per_request = (_minor_faults(pids) - before) / requests
    finally:
        channel.close()
    pages = image.nbytes / 4096  # 147: the faults of one fresh copy of the tensor
    assert per_request < pages / 2, f"{per_request:.0f} page faults per request in the gRPC processes"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_grpc_processes_start_with_grpc_cores_experiments(model_server):
    """Every gRPC process (``rungrpc`` and its children) starts with
    GRPC_EXPERIMENTS set to the setting's default, which turns grpc core's
    EventEngine listener, endpoints and Python poller off (bench/README.md,
    "grpc core's experiments": ~20% of a small request's rate on grpcio 1.81)."""
    pids = _grpc_processes(model_server)
    assert len(pids) == 3, pids  # rungrpc and its GRPC_PROCESSES=2 children
    for pid in pids:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert (
            b"GRPC_EXPERIMENTS=-event_engine_listener,-event_engine_for_all_other_endpoints,"
            b"-event_engine_poller_for_python" in environ
        ), pid


@pytest.fixture(scope="module")
def uvloop_server(test_repository, tmp_path_factory):
    """``serve`` with ``GRPC_EVENT_LOOP=uvloop``."""
    server = LiveServer(test_repository, tmp_path_factory.mktemp("uvloop-live"), {"GRPC_EVENT_LOOP": "uvloop"})
    yield server.start()
    server.stop()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_grpc_serving_processes_run_the_default_loop(model_server):
    """GRPC_EVENT_LOOP's default, asyncio: no gRPC process maps uvloop."""
    for pid in _grpc_processes(model_server):
        assert "/uvloop/" not in Path(f"/proc/{pid}/maps").read_text(), pid


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_with_uvloop_the_grpc_serving_processes_run_it_and_answer(uvloop_server):
    """GRPC_EVENT_LOOP=uvloop: each serving gRPC process (rungrpc's children,
    ``--processes 1``) runs its server on uvloop, whose extension it has
    mapped, and answers inferences (``versioned`` version 2: y = x + 2); the
    supervising ``rungrpc`` imports no event loop."""
    client = grpcclient.InferenceServerClient(uvloop_server.grpc_url)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    inp = grpcclient.InferInput("x", [2, 4], "FP32")
    inp.set_data_from_numpy(x)
    for _ in range(4):
        np.testing.assert_allclose(client.infer("versioned", [inp]).as_numpy("y"), x + 2)

    def loops() -> dict[int, tuple[bool, bool]]:
        """pid -> (a serving process, uvloop mapped)."""
        found = {}
        for pid in _grpc_processes(uvloop_server):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            serving = b"--processes" in argv and argv[argv.index(b"--processes") + 1] == b"1"
            found[pid] = (serving, "/uvloop/loop.cpython" in Path(f"/proc/{pid}/maps").read_text())
        return found

    # Ready means one gRPC process listens (it marks the ready file): the other may still be starting.
    assert wait_for(lambda: sorted(loops().values()) == [(False, False), (True, True), (True, True)]), loops()


def test_rungrpc_refuses_an_unknown_event_loop(settings):
    settings.GRPC_EVENT_LOOP = "trio"
    with pytest.raises(CommandError, match="GRPC_EVENT_LOOP must be uvloop or asyncio, not 'trio'"):
        call_command("rungrpc", "--processes", "1")
