"""Triton's system shared-memory extension driven by tritonclient (HTTP and
gRPC) and ``tritonclient.utils.shared_memory``, as Triton's examples
(simple_http_shm_client.py, simple_grpc_shm_client.py,
simple_http_shm_string_client.py) use it: regions registered, inputs read
from and outputs written into them, every span checked against its region,
regions of one team invisible and unusable to another, CUDA shared memory
refused. Runs in process and in worker mode (``model_server``)."""

from __future__ import annotations

import contextlib
import json
import uuid

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient import utils
from tritonclient.utils import InferenceServerException

from tests.support.live import bearer, manage, people_with_tokens, request

pytestmark = pytest.mark.interop


@contextlib.contextmanager
def regions(*sizes: int):
    """Fresh shared-memory objects of ``sizes`` bytes: (name, key, handle) each, destroyed after."""
    made = []
    try:
        for size in sizes:
            tag = uuid.uuid4().hex[:12]
            name, key = f"r-{tag}", f"/mh-test-{tag}"
            made.append((name, key, shm.create_shared_memory_region(name, key, size)))
        yield made
    finally:
        for _name, _key, handle in made:
            shm.destroy_shared_memory_region(handle)


def _http(server, token=None):
    headers = {"Authorization": f"Bearer {token}"} if token else None
    return httpclient.InferenceServerClient(server.http_url), headers


def _simple_data():
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.arange(100, 116, dtype=np.int32).reshape(1, 16) * -3
    return a, b


def test_http_inputs_and_outputs_in_regions(model_server):
    """simple_http_shm_client.py's flow: two INT32 inputs in one region (the
    second at an offset), both outputs in another; the answer has no data
    (nor parameters: Triton's C++ client would look for binary_data_size),
    the results are in the region; status lists the caller's regions."""
    a, b = _simple_data()
    client = httpclient.InferenceServerClient(model_server.http_url)
    with regions(128, 128) as [(in_name, in_key, in_handle), (out_name, out_key, out_handle)]:
        shm.set_shared_memory_region(in_handle, [a])
        shm.set_shared_memory_region(in_handle, [b], offset=64)
        client.register_system_shared_memory(in_name, in_key, 128)
        client.register_system_shared_memory(out_name, out_key, 128)
        try:
            status = {r["name"]: r for r in client.get_system_shared_memory_status()}
            assert status[in_name] == {"name": in_name, "key": in_key, "offset": 0, "byte_size": 128}
            assert client.get_system_shared_memory_status(out_name)[0]["key"] == out_key
            inputs = [
                httpclient.InferInput("INPUT0", [1, 16], "INT32"),
                httpclient.InferInput("INPUT1", [1, 16], "INT32"),
            ]
            inputs[0].set_shared_memory(in_name, 64)
            inputs[1].set_shared_memory(in_name, 64, offset=64)
            outputs = [httpclient.InferRequestedOutput(n, binary_data=True) for n in ("OUTPUT0", "OUTPUT1")]
            outputs[0].set_shared_memory(out_name, 64)
            outputs[1].set_shared_memory(out_name, 64, offset=64)
            result = client.infer("simple", inputs, outputs=outputs)
            out0 = result.get_output("OUTPUT0")
            assert out0 == {"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 16]}  # no data, as Triton answers
            np.testing.assert_array_equal(shm.get_contents_as_numpy(out_handle, np.int32, [1, 16]), a + b)
            np.testing.assert_array_equal(shm.get_contents_as_numpy(out_handle, np.int32, [1, 16], offset=64), a - b)
        finally:
            client.unregister_system_shared_memory(in_name)
            assert [r["name"] for r in client.get_system_shared_memory_status()] == [out_name]
            client.unregister_system_shared_memory()
        assert client.get_system_shared_memory_status() == []


def test_grpc_regions_mixed_with_raw_contents(model_server):
    """simple_grpc_shm_client.py's flow over gRPC, with one input in a region
    and one in raw_input_contents, one output in a region and one in the
    answer: the raw contents stay aligned with the outputs."""
    a, b = _simple_data()
    with grpcclient.InferenceServerClient(model_server.grpc_url) as client:
        with regions(64, 64) as [(in_name, in_key, in_handle), (out_name, out_key, out_handle)]:
            shm.set_shared_memory_region(in_handle, [b])
            client.register_system_shared_memory(in_name, in_key, 64)
            client.register_system_shared_memory(out_name, out_key, 64)
            try:
                status = client.get_system_shared_memory_status()
                assert status.regions[in_name].key == in_key and status.regions[out_name].byte_size == 64
                inputs = [
                    grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
                    grpcclient.InferInput("INPUT1", [1, 16], "INT32"),
                ]
                inputs[0].set_data_from_numpy(a)
                inputs[1].set_shared_memory(in_name, 64)
                outputs = [grpcclient.InferRequestedOutput("OUTPUT0"), grpcclient.InferRequestedOutput("OUTPUT1")]
                outputs[0].set_shared_memory(out_name, 64)
                result = client.infer("simple", inputs, outputs=outputs)
                np.testing.assert_array_equal(shm.get_contents_as_numpy(out_handle, np.int32, [1, 16]), a + b)
                np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
                assert result.get_response().raw_output_contents[0] == b""  # as Triton: an empty entry
            finally:
                client.unregister_system_shared_memory()
            assert len(client.get_system_shared_memory_status().regions) == 0


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bytes_tensors_in_regions(model_server, protocol):
    """simple_http_shm_string_client.py's flow: BYTES inputs and outputs in
    their 4-byte-length-prefixed form; the model sees the text."""
    client_module = httpclient if protocol == "http" else grpcclient
    url = model_server.http_url if protocol == "http" else model_server.grpc_url
    numbers0, numbers1 = np.arange(16, dtype=np.int32) * 7 - 20, np.arange(16, dtype=np.int32) ** 2
    text0 = np.array([str(x).encode() for x in numbers0], dtype=object).reshape(1, 16)
    text1 = np.array([str(x).encode() for x in numbers1], dtype=object).reshape(1, 16)
    expected_sum = np.array([str(x).encode() for x in numbers0 + numbers1], dtype=object).reshape(1, 16)
    expected_diff = np.array([str(x).encode() for x in numbers0 - numbers1], dtype=object).reshape(1, 16)
    sizes = [utils.serialized_byte_size(utils.serialize_byte_tensor(t)) for t in (text0, text1)]
    out_size = 256
    client = client_module.InferenceServerClient(url)
    with regions(sizes[0], sizes[1], out_size, out_size) as made:
        for (name, key, handle), data, size in zip(made[:2], (text0, text1), sizes):
            shm.set_shared_memory_region(handle, [utils.serialize_byte_tensor(data)])
            client.register_system_shared_memory(name, key, size)
        for name, key, _handle in made[2:]:
            client.register_system_shared_memory(name, key, out_size)
        try:
            inputs = [client_module.InferInput(f"INPUT{i}", [1, 16], "BYTES") for i in range(2)]
            for tensor, (name, _key, _handle), size in zip(inputs, made[:2], sizes):
                tensor.set_shared_memory(name, size)
            outputs = [client_module.InferRequestedOutput(f"OUTPUT{i}") for i in range(2)]
            for tensor, (name, _key, _handle) in zip(outputs, made[2:]):
                tensor.set_shared_memory(name, out_size)
            before = _stage_counts(model_server, "simple_string")
            client.infer("simple_string", inputs, outputs=outputs)
            after = _stage_counts(model_server, "simple_string")
            for stage in ("success", "compute_input", "compute_output"):  # the region reads and writes are counted
                assert after[stage][0] == before[stage][0] + 1 and after[stage][1] > before[stage][1], stage
            for (_name, _key, handle), expected in zip(made[2:], (expected_sum, expected_diff)):
                np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.object_, [1, 16]), expected)
        finally:
            client.unregister_system_shared_memory()


def _stage_counts(server, model: str) -> dict:
    """{stage: (count, ns)} of a model's statistics (every process of the server)."""
    status, stats = request(server, "GET", f"/v2/models/{model}/stats")
    assert status == 200, stats
    return {k: (v["count"], v["ns"]) for k, v in stats["model_stats"][0]["inference_stats"].items()}


def _refused(call, status: int, text: str):
    with pytest.raises(InferenceServerException) as info:
        call()
    assert str(info.value.status()) in (str(status), "StatusCode.INVALID_ARGUMENT", "StatusCode.NOT_FOUND")
    assert text in info.value.message(), info.value.message()


def test_every_span_is_checked_against_its_region(model_server):
    """Offsets and sizes outside a region, a size that does not match the
    tensor, a region too small for an output, an unknown region, a region
    past the end of its object: 400 with the reason; the server stays ready."""
    a, b = _simple_data()
    client = httpclient.InferenceServerClient(model_server.http_url)
    with regions(128) as [(name, key, handle)]:
        shm.set_shared_memory_region(handle, [a, b])
        _refused(lambda: client.register_system_shared_memory(name, key, 129), 400, "invalid args")
        _refused(lambda: client.register_system_shared_memory(name, key, 64, offset=100), 400, "invalid args")
        _refused(lambda: client.register_system_shared_memory(name, "/mh-test-absent", 64), 400, "Unable to open")
        _refused(
            lambda: client.register_system_shared_memory(name, "../etc/passwd", 64), 400, "invalid shared memory key"
        )
        client.register_system_shared_memory(name, key, 128)
        try:
            _refused(lambda: client.register_system_shared_memory(name, key, 128), 400, "already in manager")

            def infer(size0=64, offset0=0, size1=64, offset1=64, out_size=64, out_offset=0, region=name):
                inputs = [httpclient.InferInput(f"INPUT{i}", [1, 16], "INT32") for i in range(2)]
                inputs[0].set_shared_memory(region, size0, offset=offset0)
                inputs[1].set_shared_memory(name, size1, offset=offset1)
                outputs = [httpclient.InferRequestedOutput("OUTPUT0")]
                outputs[0].set_shared_memory(name, out_size, offset=out_offset)
                return client.infer("simple", inputs, outputs=outputs)

            _refused(lambda: infer(offset1=128), 400, "Invalid offset for shared memory region")
            _refused(lambda: infer(offset1=100), 400, "Invalid offset + byte size")
            _refused(lambda: infer(offset1=2**62, size1=2**62), 400, "Invalid offset")
            _refused(
                lambda: infer(size0=60),
                400,
                "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60",
            )
            _refused(lambda: infer(out_size=32), 400, "should be at least 64 bytes to hold the results")
            _refused(lambda: infer(out_offset=96), 400, "Invalid offset + byte size")
            _refused(lambda: infer(region="nowhere"), 400, "Unable to find system shared memory region: 'nowhere'")
            _refused(lambda: client.get_system_shared_memory_status("nowhere"), 404, "Unable to find")
            status, answer = request(
                model_server, "POST", "/v2/models/simple/infer",
                b'{"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32",'
                b' "parameters": {"shared_memory_region": "' + name.encode() + b'"}}]}',
            )  # fmt: skip
            assert status == 400 and "needs 'shared_memory_byte_size'" in answer["error"]
            np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.int32, [1, 16], offset=64), b)
            result = infer(out_offset=64)  # the inputs are read before the output overwrites INPUT1's bytes
            np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.int32, [1, 16], offset=64), a + b)
            assert "data" not in result.get_output("OUTPUT0")
        finally:
            client.unregister_system_shared_memory(name)
    assert client.is_server_ready()


def test_cuda_shared_memory_is_refused_clearly(model_server):
    """No CUDA shared memory: status answers no region, register a 400 with the reason (REST and gRPC)."""
    client = httpclient.InferenceServerClient(model_server.http_url)
    assert client.get_cuda_shared_memory_status() == []
    client.unregister_cuda_shared_memory()
    _refused(
        lambda: client.register_cuda_shared_memory("gpu", b"\0" * 64, 0, 64),
        400,
        "CUDA shared memory is not supported by this server",
    )
    with grpcclient.InferenceServerClient(model_server.grpc_url) as grpc_client:
        assert len(grpc_client.get_cuda_shared_memory_status().regions) == 0
        _refused(
            lambda: grpc_client.register_cuda_shared_memory("gpu", b"\0" * 64, 0, 64),
            400,
            "CUDA shared memory is not supported by this server",
        )
    metadata = client.get_server_metadata()
    assert "system_shared_memory" in metadata["extensions"] and "cuda_shared_memory" not in metadata["extensions"]


def test_a_region_belongs_to_its_team(model_server):
    """Team A's region: team B (and anonymous callers) cannot see it, read
    it as an input, write an output into it, register its key under another
    name, or unregister it; B's own region of the same name is B's."""
    tokens = people_with_tokens(model_server, shm_alice="shm-a", shm_bob="shm-b")  # known at once in every process
    alice, bob = {"Authorization": f"Bearer {tokens['shm_alice']}"}, {"Authorization": f"Bearer {tokens['shm_bob']}"}
    grpc_bob = {"authorization": f"Bearer {tokens['shm_bob']}"}
    a, b = _simple_data()
    client = httpclient.InferenceServerClient(model_server.http_url)
    with regions(128, 128) as [(_n, key_a, handle_a), (_m, key_b, handle_b)]:
        shm.set_shared_memory_region(handle_a, [a, b])
        client.register_system_shared_memory("data", key_a, 128, headers=alice)
        try:
            assert [r["name"] for r in client.get_system_shared_memory_status(headers=alice)] == ["data"]
            assert client.get_system_shared_memory_status(headers=bob) == []
            assert client.get_system_shared_memory_status() == []  # anonymous
            _refused(lambda: client.get_system_shared_memory_status("data", headers=bob), 404, "Unable to find")
            _refused(
                lambda: client.register_system_shared_memory("mine", key_a, 128, headers=bob),
                400,
                "is registered by another team or caller",
            )
            with grpcclient.InferenceServerClient(model_server.grpc_url) as grpc_client:
                _refused(
                    lambda: grpc_client.register_system_shared_memory("mine", key_a, 128, headers=grpc_bob),
                    400,
                    "is registered by another team or caller",
                )
                assert len(grpc_client.get_system_shared_memory_status(headers=grpc_bob).regions) == 0

            def infer(headers, in_region="data", out_region="data"):
                inputs = [httpclient.InferInput(f"INPUT{i}", [1, 16], "INT32") for i in range(2)]
                inputs[0].set_shared_memory(in_region, 64)
                inputs[1].set_data_from_numpy(b)
                outputs = [httpclient.InferRequestedOutput("OUTPUT0")]
                outputs[0].set_shared_memory(out_region, 64, offset=64)
                return client.infer("simple", inputs, outputs=outputs, headers=headers)

            _refused(lambda: infer(bob), 400, "Unable to find system shared memory region: 'data'")
            _refused(lambda: infer(None), 400, "Unable to find system shared memory region: 'data'")
            shm.set_shared_memory_region(handle_b, [a * 0])
            client.register_system_shared_memory("data", key_b, 128, headers=bob)  # B's own "data"
            infer(bob)  # reads and writes B's region only
            np.testing.assert_array_equal(shm.get_contents_as_numpy(handle_b, np.int32, [1, 16], offset=64), b)
            np.testing.assert_array_equal(shm.get_contents_as_numpy(handle_a, np.int32, [1, 16], offset=64), b)
            client.unregister_system_shared_memory("data", headers=bob)
            client.unregister_system_shared_memory(headers=bob)
            assert [r["key"] for r in client.get_system_shared_memory_status(headers=alice)] == [key_a]
            infer(alice)
            np.testing.assert_array_equal(shm.get_contents_as_numpy(handle_a, np.int32, [1, 16], offset=64), a + b)
            assert request(model_server, "GET", "/v2/systemsharedmemory/status", headers=bearer("mh_unknown"))[0] == 401
        finally:
            client.unregister_system_shared_memory(headers=alice)
        assert client.get_system_shared_memory_status(headers=alice) == []
    output = manage(model_server, "shell", "-c", _AUDITED, env={"MH_KEYS": json.dumps([key_a, key_b])})
    events = json.loads(output.strip().splitlines()[-1])
    assert events == [
        ["shm_alice", "shared_memory.register", "data", "team:shm-a"],
        ["shm_bob", "shared_memory.register", "data", "team:shm-b"],
        ["shm_bob", "shared_memory.unregister", ["data"], "team:shm-b"],
        ["shm_alice", "shared_memory.unregister", ["data"], "team:shm-a"],
    ]


#: The audit log's shared-memory events of the keys in $MH_KEYS (actor, action, region name(s), owner), as JSON.
_AUDITED = """
import json, os
from models_store.models import AuditEvent
keys = json.loads(os.environ["MH_KEYS"])
events = AuditEvent.objects.filter(action__startswith="shared_memory.").order_by("id")
owners = {e.detail["owner"] for e in events if e.detail.get("key") in keys}
print(json.dumps([
    [e.actor_name, e.action, e.detail.get("name", e.detail.get("names")), e.detail["owner"]]
    for e in events if e.detail.get("key") in keys or (e.action.endswith("unregister") and e.detail["owner"] in owners)
]))
"""


def test_a_client_that_shrinks_its_region_gets_400s_and_crashes_nothing(model_server):
    """Issue 34: a client truncates its registered 16 MiB region to 4 KiB and
    back in a tight loop while three threads infer from it (HTTP, gRPC,
    HTTP; inputs and outputs in the region) and another caller sends its
    tensors in the body. Every answer is correct (numpy; see
    tests/support/shrinking.py for the zeros a truncation leaves) or a
    400/INVALID_ARGUMENT naming the region ("it shrank"); no 5xx, no refused
    connection; the other caller is never refused; no server process (nor,
    in worker mode, the worker) died or was replaced, and the server is
    ready after, for that caller too."""
    from tests.support.rss import process_tree
    from tests.support.shrinking import Model, shrink_while_inferring

    model = Model("identity_fp32", "INPUT0", "OUTPUT0", (1, 1 << 18), lambda x: x, (1, 1024))
    processes = sorted(process_tree(model_server.process.pid))
    workers = {name: process.pid for name, process in model_server.worker_processes.items()}
    run = shrink_while_inferring(model_server, model)
    assert not run.failures, run.failures[:5]
    assert run.whole and run.refused and run.other, (run.whole, len(run.refused), run.other)
    assert any(f"shared memory region '{run.name}'" in message for message in run.refused), run.refused[:3]
    assert sorted(process_tree(model_server.process.pid)) == processes
    assert {name: p.pid for name, p in model_server.worker_processes.items() if p.poll() is None} == workers
    http = httpclient.InferenceServerClient(model_server.http_url)
    assert http.is_server_ready()
    with grpcclient.InferenceServerClient(model_server.grpc_url) as grpc_client:
        assert grpc_client.is_server_ready()
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        tensor = grpcclient.InferInput("INPUT0", [2, 4], "FP32")
        tensor.set_data_from_numpy(x)
        np.testing.assert_array_equal(grpc_client.infer("identity_fp32", [tensor]).as_numpy("OUTPUT0"), x)
