"""The region registry of the system shared-memory extension
(inference/shared_memory/regions.py) on real ``/dev/shm`` objects: every offset and
size checked against its region, owners apart, registrations shared by the
processes of a machine, a region unregistered while in use still valid for
its user, an object shrunk behind the server's back refused, not a fault
(regions are read and written through descriptors: tests/inference/
test_region_io.py)."""

from __future__ import annotations

import mmap
import os
import re
import uuid

import numpy as np
import pytest

from inference.protocol.errors import InvalidInput
from inference.protocol.types import RequestInput, ResponseOutput
from inference.shared_memory import region_tensors
from inference.shared_memory import regions as shm


class _Object:
    """A shared-memory object as a client makes one (``shm_open``, ``ftruncate``, ``mmap``)."""

    def __init__(self, size: int):
        self.path = region_tensors.SHM_DIR / f"mh-unit-{uuid.uuid4().hex[:12]}"
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.ftruncate(fd, size)
        self.buf = mmap.mmap(fd, size)
        os.close(fd)


@pytest.fixture
def objects():
    """make(size) -> (key, object) of a new shared-memory object of ``size`` bytes (removed after)."""
    made = []

    def make(size: int) -> tuple[str, _Object]:
        made.append(_Object(size))
        return "/" + made[-1].path.name, made[-1]

    yield make
    for memory in made:
        memory.path.unlink()


@pytest.fixture
def registry(tmp_path):
    return shm.RegionRegistry(tmp_path / "shm")


def test_tensor_references_need_region_and_size():
    assert region_tensors.tensor_reference({}, "x") is None
    assert region_tensors.tensor_reference({"binary_data": True}, "x") is None
    ref = region_tensors.tensor_reference({"shared_memory_region": "r", "shared_memory_byte_size": 8}, "x")
    assert ref == region_tensors.TensorReference("r", 8, 0)
    for bad, text in (
        ({"shared_memory_region": "r"}, "needs 'shared_memory_byte_size'"),
        ({"shared_memory_byte_size": 8}, "need 'shared_memory_region'"),
        ({"shared_memory_region": "r", "shared_memory_byte_size": -1}, "non-negative integer"),
        ({"shared_memory_region": "r", "shared_memory_byte_size": 8, "shared_memory_offset": 1.5}, "non-negative"),
        ({"shared_memory_region": "r", "shared_memory_byte_size": True}, "non-negative integer"),
        ({"shared_memory_region": "", "shared_memory_byte_size": 8}, "non-empty string"),
    ):
        with pytest.raises(InvalidInput, match=text):
            region_tensors.tensor_reference(bad, "input 'x'")


@pytest.mark.parametrize(
    ("offset", "size", "ok"),
    [(0, 64, True), (60, 4, True), (64, 0, True), (0, 65, False), (61, 4, False), (64, 1, False), (65, 0, False),
     (2**63, 2**63, False)],
)  # fmt: skip
def test_spans_lie_within_the_region(offset, size, ok):
    region = shm.Region("r", "/k", 16, 64, "team:a", "id")
    if ok:
        shm.check_span(region, offset, size, "input 'x'")
    else:
        with pytest.raises(InvalidInput, match="Invalid offset"):
            shm.check_span(region, offset, size, "input 'x'")


def test_register_checks_the_object(registry, objects, tmp_path):
    key, _memory = objects(100)
    with pytest.raises(InvalidInput, match="invalid args"):
        registry.register("team:a", "r", key, 50, 51)
    with pytest.raises(InvalidInput, match="Unable to open"):
        registry.register("team:a", "r", "/mh-unit-absent-" + uuid.uuid4().hex, 0, 1)
    for bad in ("/a/b", "..", "/", "", "x" * 300):
        with pytest.raises(InvalidInput):
            registry.register("team:a", "r", bad, 0, 1)
    outside = tmp_path / "secret"
    outside.write_bytes(b"s" * 64)
    link = region_tensors.SHM_DIR / f"mh-unit-link-{uuid.uuid4().hex[:8]}"
    link.symlink_to(outside)
    try:
        with pytest.raises(InvalidInput, match="Unable to open"):  # O_NOFOLLOW: never a file elsewhere
            registry.register("team:a", "r", "/" + link.name, 0, 8)
    finally:
        link.unlink()
    region = registry.register("team:a", "r", key, 50, 50)
    assert (region.key, region.offset, region.byte_size) == (key, 50, 50)
    with pytest.raises(InvalidInput, match="already in manager"):
        registry.register("team:a", "r", key, 0, 10)


def test_owners_are_apart(registry, objects):
    key_a, _ = objects(64)
    key_b, _ = objects(64)
    registry.register("team:a", "data", key_a, 0, 64)
    registry.register("team:a", "again", key_a, 0, 32)  # one owner may name its object twice
    with pytest.raises(InvalidInput, match="registered by another team"):
        registry.register("team:b", "mine", key_a, 0, 64)
    with pytest.raises(InvalidInput, match="registered by another team"):
        registry.register("team:b", "mine", key_a.lstrip("/"), 0, 64)  # the same object without its slash
    registry.register("team:b", "data", key_b, 0, 64)
    assert [r.key for r in registry.status("team:b")] == [key_b]
    assert [r.name for r in registry.status("team:a")] == ["again", "data"]
    with pytest.raises(shm.RegionNotFound):
        registry.status("team:c", "data")
    assert registry.unregister("team:b", "again") == []
    assert [r.name for r in registry.unregister("team:b")] == ["data"]
    assert len(registry.status("team:a")) == 2


def test_processes_of_a_machine_share_registrations(tmp_path, objects):
    key, memory = objects(64)
    first, second = shm.RegionRegistry(tmp_path / "shm"), shm.RegionRegistry(tmp_path / "shm")
    first.register("anonymous", "r", key, 0, 64)
    memory.buf[:8] = np.arange(2, dtype=np.int32).tobytes()
    span = second.span("anonymous", region_tensors.TensorReference("r", 8, 0), "input 'x'")
    np.testing.assert_array_equal(span.read(np.int32, (2,)), [0, 1])
    first.unregister("anonymous", "r")
    with pytest.raises(InvalidInput, match="Unable to find system shared memory region: 'r'"):
        second.span("anonymous", region_tensors.TensorReference("r", 8, 0), "input 'x'")
    del span
    assert second._objects
    second.prune()  # the other process's open object of the unregistered region goes: its memory can be freed
    assert not second._objects


def test_a_region_unregistered_in_use_stays_valid_for_its_user(registry, objects):
    key, memory = objects(4096)
    data = np.linspace(-1, 1, 1024, dtype=np.float32)
    memory.buf[: data.nbytes] = data.tobytes()
    registry.register("team:a", "r", key, 0, data.nbytes)
    tensor = RequestInput("x", "FP32", (4, 256), None, {})
    reference = region_tensors.TensorReference("r", data.nbytes, 0)
    array, span = region_tensors.read_input(registry, "team:a", tensor, reference)
    assert (span.key, span.offset, span.nbytes) == (key, 0, data.nbytes)
    memory.buf[:4] = np.float32(7).tobytes()  # the array is ours: a later write into the region is not seen
    registry.unregister("team:a")
    np.testing.assert_array_equal(array.reshape(-1), data)
    assert span.read(np.float32, (1024,))[0] == 7  # the request's span stays open after the unregistration
    with pytest.raises(InvalidInput, match="Unable to find"):
        region_tensors.read_input(registry, "team:a", tensor, reference)


def test_inputs_are_checked_before_they_are_read(registry, objects):
    """A size that does not match the tensor is refused before anything is
    allocated or read; a numeric input a worker reads itself is a stand-in
    without memory; BYTES inputs keep their layout."""
    key, memory = objects(64)
    text = np.array([b"one", b"", b"drei"], dtype=object)
    packed = b"".join(len(t).to_bytes(4, "little") + t for t in text)
    memory.buf[: len(packed)] = packed
    registry.register("team:a", "r", key, 0, 64)
    tensor = RequestInput("x", "FP32", (4, 4), None, {})
    with pytest.raises(InvalidInput, match=re.escape("input byte size mismatch for input 'x'. Expected 64, got 60")):
        region_tensors.read_input(registry, "team:a", tensor, region_tensors.TensorReference("r", 60, 0))
    triton = "input byte size mismatch for input 'x' for model 'm'. Expected 64, got 60"  # with the model: Triton's
    with pytest.raises(InvalidInput, match=re.escape(triton)):
        region_tensors.read_input(registry, "team:a", tensor, region_tensors.TensorReference("r", 60, 0), model="m")
    standin, _span = region_tensors.read_input(
        registry, "team:a", tensor, region_tensors.TensorReference("r", 64, 0), defer=True
    )
    assert standin.shape == (4, 4) and standin.dtype == np.float32 and standin.strides == (0, 0)
    strings = RequestInput("t", "BYTES", (3,), None, {})
    array, _ = region_tensors.read_input(
        registry, "team:a", strings, region_tensors.TensorReference("r", len(packed), 0), defer=True
    )
    assert array.tolist() == text.tolist()


def test_an_object_made_smaller_is_refused_not_a_fault(registry, objects):
    key, _memory = objects(8192)
    registry.register("team:a", "r", key, 0, 8192)
    registry.span("team:a", region_tensors.TensorReference("r", 8192, 0), "input 'x'")
    fd = os.open(region_tensors.object_path(key), os.O_RDWR)
    try:
        os.ftruncate(fd, 16)
    finally:
        os.close(fd)
    text = r"input 'x': shared memory region 'r' is smaller than it was registered: .* holds 16 bytes.*\(it shrank\)"
    with pytest.raises(InvalidInput, match=text):
        registry.span("team:a", region_tensors.TensorReference("r", 4096, 4096), "input 'x'")


def test_outputs_need_room_and_bytes_keep_their_layout(registry, objects):
    key, memory = objects(64)
    registry.register("team:a", "out", key, 0, 64)
    text = np.array([b"one", b"", b"drei"], dtype=object)
    reference = region_tensors.TensorReference("out", 56, 8)
    output = ResponseOutput("y", "BYTES", (3,), text)
    region_tensors.write_output(output, reference, registry.span("team:a", reference, "output 'y'"))
    expected = b"".join(len(t).to_bytes(4, "little") + t for t in text)
    assert bytes(memory.buf[8 : 8 + len(expected)]) == expected
    assert output.parameters == {
        "shared_memory_region": "out",
        "shared_memory_byte_size": 19,
        "shared_memory_offset": 8,
    }
    small = region_tensors.TensorReference("out", 8, 0)
    big = ResponseOutput("z", "FP64", (2,), np.ones(2))
    with pytest.raises(InvalidInput, match=r"\(8 bytes\) should be at least 16 bytes"):
        region_tensors.write_output(big, small, registry.span("team:a", small, "output 'z'"))


def test_a_worker_writes_outputs_the_front_end_reads_back_for_the_log(registry, objects):
    """Worker mode on one machine: the worker writes an output into the span
    the front end checked (BYTES in their binary layout); the front end's
    output is a stand-in, read back from the region only for the payload
    log; a span too small is refused with Triton's text."""
    from inference.workers import messages
    from inference.workers.server.runtime import _write_regions

    key, _memory = objects(256)
    registry.register("team:a", "out", key, 64, 128)
    reference = region_tensors.TensorReference("out", 100, 8)
    located = registry.span("team:a", reference, "output 'y'")
    assert (located.key, located.offset, located.nbytes) == (key, 72, 100)
    text = np.array([["ab", "c"], ["", "déf"]], dtype=object)  # ONNX Runtime's string outputs are str
    (info,) = _write_regions([messages.RegionTensor("y", "", [], key, 72, 100)], {"y": text})
    assert (info.dtype, info.shape, info.offset, info.nbytes) == ("bytes", [2, 2], 72, 4 * 4 + 7)
    output = region_tensors.written_output("y", "BYTES", reference, tuple(info.shape), info.nbytes)
    assert output.in_region and output.parameters["shared_memory_byte_size"] == 23
    plan = region_tensors.RegionPlan(outputs={"y": located})
    assert region_tensors.read_for_log(plan, [], [output], {"y": info})
    assert output.data.tolist() == [[b"ab", b"c"], [b"", "déf".encode()]]
    with pytest.raises(InvalidInput, match=r"\(8 bytes\) should be at least 16 bytes"):
        _write_regions([messages.RegionTensor("z", "", [], key, 72, 8)], {"z": np.ones(2)})


def test_a_planned_input_is_read_where_it_is_needed(registry, objects):
    """For a remote executor a numeric input in a region is only planned (a
    worker on this machine reads it itself): a worker elsewhere gets it read
    by the front end (RegionPlan.read_inputs, as the connection encodes the
    request), and the payload log reads it back when it samples the
    request; a region that shrank meanwhile refuses the first and leaves the
    record out of the second."""
    key, memory = objects(4096)
    data = np.arange(-8, 8, dtype=np.float32).reshape(4, 4)
    memory.buf[64 : 64 + data.nbytes] = data.tobytes()
    registry.register("team:a", "r", key, 0, 4096)
    tensor = RequestInput("x", "FP32", (4, 4), None, {})
    reference = region_tensors.TensorReference("r", data.nbytes, 64)
    tensor.data, span = region_tensors.read_input(registry, "team:a", tensor, reference, defer=True)
    plan = region_tensors.RegionPlan(inputs={"x": span})
    assert not tensor.data.any()  # a stand-in: nothing was read
    other = np.ones(3, np.int64)
    feeds = plan.read_inputs({"x": tensor.data, "other": other})
    np.testing.assert_array_equal(feeds["x"], data)
    assert feeds["other"] is other and not tensor.data.any()
    assert region_tensors.read_for_log(plan, [tensor], [], None)
    np.testing.assert_array_equal(tensor.data, data)
    fd = os.open(region_tensors.object_path(key), os.O_RDWR)
    try:
        os.ftruncate(fd, 100)
    finally:
        os.close(fd)
    with pytest.raises(InvalidInput, match=r"input 'x': shared memory region 'r' is smaller .*\(it shrank\)"):
        plan.read_inputs({"x": region_tensors.unread(np.float32, (4, 4))})
    assert not region_tensors.read_for_log(plan, [tensor], [], None)
