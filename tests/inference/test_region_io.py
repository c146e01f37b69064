"""Reading and writing client-owned shared-memory objects through a
descriptor (inference/shared_memory/region_io.py), on real ``/dev/shm`` objects: the
bytes land in our own arrays (values compared with numpy), an object shrunk
between the size check and the read is a clear InvalidInput naming the
region ("it shrank"), never a SIGBUS, and a concurrent shrinker cannot
kill the process that reads (these tests would die with it if a read went
through a mapping)."""

from __future__ import annotations

import os
import threading
import time
import uuid

import numpy as np
import pytest

from inference.protocol.errors import InvalidInput
from inference.protocol.types import RequestInput
from inference.shared_memory import region_io, region_tensors
from inference.shared_memory import regions as shm


@pytest.fixture
def make_object():
    """make(data) -> (key, path) of a new shared-memory object holding ``data`` (removed after)."""
    made = []

    def make(data: bytes) -> tuple[str, os.PathLike]:
        path = region_tensors.SHM_DIR / f"mh-unit-io-{uuid.uuid4().hex[:12]}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        made.append(path)
        return "/" + path.name, path

    yield make
    for path in made:
        path.unlink(missing_ok=True)


def _truncate(path, size: int) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)


def _span(key: str, path, offset: int, nbytes: int, end: int) -> region_io.Span:
    return region_io.Span(region_io.ObjectFile(path, key), offset, nbytes, end, "input 'x': shared memory region 'r'")


def test_a_span_is_read_into_an_array_of_ours(make_object, monkeypatch):
    data = np.random.default_rng(1).random((3, 1000), dtype=np.float32)
    key, path = make_object(b"\xff" * 24 + data.tobytes() + b"\xff" * 8)
    span = _span(key, path, 24, data.nbytes, 24 + data.nbytes + 8)
    array = span.read(np.float32, (3, 1000))
    np.testing.assert_array_equal(array, data)
    assert array.flags.owndata and array.flags.writeable and array.flags.aligned
    monkeypatch.setattr(region_io, "MAX_IO", 1000)  # a read the kernel splits (above 2 GiB): several calls
    np.testing.assert_array_equal(span.read(np.float32, (3, 1000)), data)
    with pytest.raises(InvalidInput, match=r"12000 bytes do not hold float32 \[2, 1000\]"):
        span.read(np.float32, (2, 1000))


def test_an_object_shrunk_between_the_check_and_the_read_is_refused(make_object):
    """The race the size check alone cannot close: the object is checked,
    then shrinks, then is read; the read comes up short and says so."""
    data = np.arange(4096, dtype=np.int32)  # 16 KiB
    key, path = make_object(data.tobytes())
    span = _span(key, path, 1024, 8192, data.nbytes)
    span.check()  # holds the region
    _truncate(path, 4096)
    buffer = np.full(2048, -1, dtype=np.int32)
    with pytest.raises(InvalidInput) as info:
        region_io.read_into(span.file, span.offset, buffer, span.label)
    assert info.value.message == (
        f"input 'x': shared memory region 'r' is smaller than when it was checked: its object '{key}' "
        "ends at byte 4096, inside the 8192 bytes read from byte 1024 (it shrank)"
    )
    np.testing.assert_array_equal(buffer[:768], data[256:1024])  # what was there is what was read
    with pytest.raises(InvalidInput, match=r"holds 4096 bytes, fewer than the 16384 it needs \(it shrank\)"):
        span.read(np.int32, (2048,))  # checked first: nothing allocated, nothing read
    _truncate(path, 0)
    with pytest.raises(InvalidInput, match="ends at byte 1024"):
        region_io.read_into(span.file, span.offset, buffer, span.label)


def test_writes_go_through_the_descriptor(make_object):
    """A write is checked against the object's size first (shrunk: refused);
    one that races a shrink cannot fault either: the kernel extends the
    object to the span's end again, within the region the client registered."""
    key, path = make_object(bytes(8192))
    span = _span(key, path, 4096, 4096, 8192)
    values = np.linspace(0, 1, 1024, dtype=np.float32)
    span.write(values)
    np.testing.assert_array_equal(np.fromfile(path, np.float32)[1024:], values)
    _truncate(path, 100)
    with pytest.raises(InvalidInput, match=r"holds 100 bytes, fewer than the 8192 it needs \(it shrank\)"):
        span.write(values)
    region_io.write_from(span.file, span.offset, values, span.label)  # as if it shrank after the check
    assert path.stat().st_size == 8192
    written = np.fromfile(path, np.float32)
    np.testing.assert_array_equal(written[1024:], values)
    assert not written[25:1024].any()  # the client's truncation zeroed what lay past byte 100


def test_only_regular_files_are_opened(make_object, tmp_path):
    fifo = region_tensors.SHM_DIR / f"mh-unit-fifo-{uuid.uuid4().hex[:8]}"
    os.mkfifo(fifo, 0o600)
    try:
        with pytest.raises(InvalidInput, match="not a shared memory object"):
            region_io.ObjectFile(fifo, "/" + fifo.name)
    finally:
        fifo.unlink()
    (tmp_path / "secret").write_bytes(b"s" * 64)
    link = region_tensors.SHM_DIR / f"mh-unit-link-{uuid.uuid4().hex[:8]}"
    link.symlink_to(tmp_path / "secret")
    try:
        with pytest.raises(InvalidInput, match="Unable to open shared memory region"):
            region_io.ObjectFile(link, "/" + link.name)
    finally:
        link.unlink()


def test_a_concurrent_shrinker_cannot_kill_the_reader(tmp_path, make_object):
    """A thread truncates the object to 4 KiB and back (and writes its
    values again) while this thread reads a 1 MiB input from the region
    through the registry: every read is the values (where the truncation
    zeroed them and they were not written back yet: zeros) or InvalidInput
    naming the region; both happen, and this process is alive to count them."""
    values = np.random.default_rng(2).uniform(1, 2, 1 << 18).astype(np.float32)  # 1 MiB, no zeros
    key, path = make_object(bytes(4096) + values.tobytes())
    registry = shm.RegionRegistry(tmp_path / "shm")
    registry.register("team:a", "big", key, 0, 4096 + values.nbytes)
    tensor = RequestInput("x", "FP32", (1, values.size), None, {})
    reference = region_tensors.TensorReference("big", values.nbytes, 4096)
    stop = threading.Event()

    def shrink():
        fd = os.open(path, os.O_RDWR)
        try:
            while not stop.is_set():
                os.ftruncate(fd, 4096)
                os.ftruncate(fd, 4096 + values.nbytes)
                os.pwrite(fd, values, 4096)
        finally:
            os.close(fd)

    shrinker = threading.Thread(target=shrink)
    shrinker.start()
    whole = refused = 0
    deadline = time.monotonic() + 10
    try:
        while (not whole or not refused or whole + refused < 200) and time.monotonic() < deadline:
            try:
                array, _span = region_tensors.read_input(registry, "team:a", tensor, reference)
            except InvalidInput as exc:
                assert "input 'x': shared memory region 'big' is smaller than" in exc.message, exc.message
                assert exc.message.endswith("(it shrank)")
                refused += 1
                continue
            got = array.reshape(-1)
            assert np.all((got == values) | (got == 0))
            whole += bool(np.array_equal(got, values))
    finally:
        stop.set()
        shrinker.join()
    assert whole and refused, (whole, refused)
