"""Reading and writing client-owned shared-memory objects (Triton's system
shared-memory extension) through a file descriptor, never through a mapping.

A client owns its ``/dev/shm`` object and may shrink it (``ftruncate``) at
any moment. A process that had mapped it would then die of SIGBUS on its
next access past the new end (a size checked just before is no help: the
shrink may land between the check and the access). Here the bytes move with
``preadv`` into a buffer this process allocated and with ``pwrite`` out of
one, so a shrink shows as a short read, which is a clear error
(:class:`~inference.protocol.errors.InvalidInput`: HTTP 400, gRPC
INVALID_ARGUMENT) and never a fault. A read is one copy (the kernel's, from
the object's pages into the buffer), in as few system calls as the kernel
allows (one up to 2 GiB).

A write into an object shrunk meanwhile cannot fault either: the kernel
extends the object again (up to the span's end, which lay within the
region the client registered); the client's truncation and our write
race, as two writers of a file do.

- :class:`ObjectFile`: an open object, checked to be a regular file (opened
  without following links); closed when the last holder lets it go.
- :class:`Span`: ``nbytes`` bytes of an object from byte ``offset`` (of the
  object), checked against the object's current size before each read or
  write, with the words an error message names it by.
"""

from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from inference.protocol.errors import InvalidInput

#: The most bytes Linux moves in one read or write call (MAX_RW_COUNT).
MAX_IO = 0x7FFFF000


class ObjectFile:
    """An open shared-memory object (``path``, the client's ``key``):
    read-write, opened with ``O_NOFOLLOW`` and checked to be a regular file.
    The descriptor is closed when the object is collected, so whoever holds
    it (a request, a registry's cache) may use it. Raises InvalidInput
    (``unopened``, when the object cannot be opened: a registration's
    RegionNotOpened, gRPC INTERNAL as Triton answers)."""

    __slots__ = ("fd", "key")

    def __init__(self, path: Path, key: str, unopened: type[InvalidInput] = InvalidInput):
        self.key = key
        self.fd = -1
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise unopened(f"Unable to open shared memory region: '{key}' ({exc.strerror})") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise InvalidInput(f"Invalid shared memory region: '{key}' (not a shared memory object)")
        self.fd = fd

    def size(self) -> int:
        """The object's current size in bytes."""
        return os.fstat(self.fd).st_size

    def __del__(self):
        fd, self.fd = getattr(self, "fd", -1), -1
        if fd >= 0:
            os.close(fd)


def _bytes(buffer) -> memoryview:
    """A C-contiguous buffer as a flat view of its bytes (numpy arrays of any dtype too)."""
    if isinstance(buffer, np.ndarray):
        if not buffer.flags.c_contiguous:
            raise ValueError("a C-contiguous array is needed")
        buffer = buffer.reshape(-1).view(np.uint8)
    return memoryview(buffer).cast("B")


def read_into(file: ObjectFile, offset: int, buffer, label: str) -> None:
    """Fill ``buffer`` (a writable, C-contiguous buffer: a numpy array or a
    bytearray) with the object's bytes from ``offset`` (``preadv``, no
    mapping). Raises InvalidInput naming ``label`` when the object ends
    before the buffer is full (it shrank)."""
    view = _bytes(buffer)
    done, total = 0, view.nbytes
    while done < total:  # one call up to MAX_IO bytes; more only for a short read or a larger tensor
        try:
            got = os.preadv(file.fd, [view[done : done + MAX_IO]], offset + done)
        except OSError as exc:
            raise InvalidInput(f"{label}: reading its object '{file.key}' failed ({exc.strerror})") from None
        if not got:
            raise InvalidInput(
                f"{label} is smaller than when it was checked: its object '{file.key}' ends at byte "
                f"{offset + done}, inside the {total} bytes read from byte {offset} (it shrank)"
            )
        done += got


def write_from(file: ObjectFile, offset: int, data, label: str) -> None:
    """Write ``data`` (a C-contiguous buffer) into the object from ``offset``
    (``pwrite``, no mapping). Raises InvalidInput naming ``label`` when the
    kernel refuses it (e.g. no room left in ``/dev/shm``)."""
    view = _bytes(data)
    done, total = 0, view.nbytes
    while done < total:
        try:
            wrote = os.pwrite(file.fd, view[done : done + MAX_IO], offset + done)
        except OSError as exc:
            raise InvalidInput(f"{label}: writing its object '{file.key}' failed ({exc.strerror})") from None
        if not wrote:
            raise InvalidInput(f"{label}: its object '{file.key}' took no more bytes at byte {offset + done}")
        done += wrote


@dataclass(frozen=True, slots=True)
class Span:
    """``nbytes`` bytes of an open shared-memory object from byte ``offset``
    of the object (``key``: the client's name of it), as :func:`read_into`
    and :func:`write_from` move them; ``label`` names it in errors (e.g.
    "input 'x': shared memory region 'r'"); ``end``: the byte the object
    must reach for the span to be read or written (the end of the region
    it lies in, which the client registered)."""

    file: ObjectFile
    offset: int
    nbytes: int
    end: int
    label: str

    @property
    def key(self) -> str:
        return self.file.key

    def first(self, nbytes: int) -> Span:
        """The span's first ``nbytes`` bytes (at most its own)."""
        return replace(self, nbytes=min(nbytes, self.nbytes))

    def check(self) -> None:
        """Raise InvalidInput when the object no longer reaches ``end`` (it shrank)."""
        size = self.file.size()
        if size < self.end:
            raise InvalidInput(
                f"{self.label} is smaller than it was registered: its object '{self.key}' holds "
                f"{size} bytes, fewer than the {self.end} it needs (it shrank)"
            )

    def read_into(self, buffer) -> None:
        """Fill ``buffer`` (``nbytes`` bytes) from the span after :meth:`check`. Raises InvalidInput."""
        self.check()
        read_into(self.file, self.offset, buffer, self.label)

    def read(self, dtype, shape: tuple) -> np.ndarray:
        """The span's bytes in a new array of ``dtype`` and ``shape`` (which
        must be ``nbytes`` bytes), allocated here only after :meth:`check`:
        one copy. Raises InvalidInput."""
        dtype = np.dtype(dtype)
        if math.prod(shape) * dtype.itemsize != self.nbytes:
            raise InvalidInput(f"{self.label}: {self.nbytes} bytes do not hold {dtype} {list(shape)}")
        self.check()
        array = np.empty(shape, dtype)
        read_into(self.file, self.offset, array, self.label)
        return array

    def write(self, data) -> None:
        """Write ``data`` (at most ``nbytes`` bytes) at the span's start after :meth:`check`. Raises InvalidInput."""
        self.check()
        write_from(self.file, self.offset, data, self.label)
