"""Frames of the worker transport: a msgpack header and raw tensor bytes.

Between a front-end process and an inference worker every message is one
frame::

    u32 body length | u32 header length | header (msgpack) | pad | tensor | pad | tensor ...

All integers little-endian. Each tensor starts at a 16-byte aligned offset
of the body; the header lists, per tensor, ``[name, dtype, shape, offset,
nbytes]`` with ``dtype`` a numpy type string (``"<f4"``) or ``"bytes"``
(BYTES: the binary tensor data layout, a 4-byte little-endian length before
each element). Numeric tensors are sent straight from their memory
(``socket.sendmsg`` with one buffer per tensor) and received into one
buffer that they are then views of: one copy into the transport and one out
of it, no base64 and no pickle; nothing in a frame can make the receiver
run code. On one machine a request's tensors may lie in memory the
connection's two ends share instead (:class:`SharedBuffer`, announced by a
frame ``{"shared": size}`` with its descriptor attached; the request's
header then says ``"shared": true`` and its offsets are from that memory's
start).
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Callable

import msgpack
import numpy as np

from inference.codecs import bytes as bytes_codec
from inference.protocol.errors import InvalidInput

PREFIX = struct.Struct("<II")
ALIGN = 16
MAX_HEADER = 1 << 20
_PAD = bytes(ALIGN)


class FrameError(ConnectionError):
    """The peer closed the connection or sent something that is not a frame."""


def _tensor_buffer(array: np.ndarray) -> tuple[str, memoryview | bytes]:
    if array.dtype.kind in "OUS":
        return "bytes", bytes_codec.serialize(array)
    dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
    data = np.ascontiguousarray(array, dtype=dtype)
    return dtype.str, memoryview(data).cast("B") if data.size else b""


def data_start(header_length: int) -> int:
    """Where the tensors begin in a frame's body: aligned, after the header."""
    end = PREFIX.size + header_length
    return end + (-end % ALIGN)


def _describe(tensors) -> tuple[list, list, int]:
    """Each tensor's [name, dtype, shape, offset, nbytes] at aligned offsets
    from 0, its bytes, and the bytes they take together."""
    described, datas = [], []
    offset = 0
    for name, array in tensors:
        kind, data = _tensor_buffer(array)
        offset += -offset % ALIGN
        described.append([name, kind, list(array.shape), offset, len(data)])
        datas.append(data)
        offset += len(data)
    return described, datas, offset


def encode(header: dict, tensors=(), shared: Callable[[int], SharedBuffer | None] | None = None) -> list:
    """The buffers of one frame (for :func:`send`): ``header`` plus the
    ``tensors`` ((name, array) pairs), described in ``header["tensors"]``
    with offsets relative to :func:`data_start`. ``shared``: for a request
    whose numeric tensors take SHARED_MIN..SHARED_MAX bytes (no BYTES), the
    connection's shared memory of at least that many bytes (or None); the
    tensors' bytes are then copied there, at offsets from its start, and
    the frame (``"shared": true``) carries only the header."""
    described, datas, offset = _describe(tensors)
    memory = None
    if shared is not None and SHARED_MIN <= offset <= SHARED_MAX and all(e[1] != "bytes" for e in described):
        memory = shared(offset)
    if memory is not None:
        for entry, data in zip(described, datas):
            memory.view[entry[3] : entry[3] + entry[4]] = data
        head = msgpack.packb({**header, "tensors": described, "shared": True}, use_bin_type=True)
        return [PREFIX.pack(PREFIX.size + len(head) - 4, len(head)), head]
    head = msgpack.packb({**header, "tensors": described}, use_bin_type=True)
    start = data_start(len(head))
    end = start + offset if described else PREFIX.size + len(head)
    buffers = [PREFIX.pack(end - 4, len(head)), head]
    position = PREFIX.size + len(head)
    for entry, data in zip(described, datas):
        pad = start + entry[3] - position
        if pad:
            buffers.append(_PAD[:pad])
        if len(data):
            buffers.append(data)
        position = start + entry[3] + len(data)
    return buffers


def views(buffers: list) -> list[memoryview]:
    """Byte views of a frame's buffers (for :func:`send_views`)."""
    return [memoryview(b).cast("B") if not isinstance(b, bytes) else memoryview(b) for b in buffers]


def send(sock: socket.socket, buffers: list) -> None:
    """Send every buffer (``sendmsg``, resuming after partial sends)."""
    send_views(sock, views(buffers))


def send_views(sock: socket.socket, views: list[memoryview]) -> None:
    """Send byte views, removing what was sent from ``views`` as it goes: on
    a non-blocking socket that raises BlockingIOError, ``views`` holds what
    is left to send."""
    while views:
        sent = sock.sendmsg(views[:512])  # IOV_MAX is 1024 on Linux
        while sent:
            if sent >= len(views[0]):
                sent -= len(views[0])
                views.pop(0)
            else:
                views[0] = views[0][sent:]
                sent = 0


#: Requests whose tensors take at least SHARED_MIN and at most SHARED_MAX
#: bytes go through the connection's shared memory (front end and worker on
#: one machine); larger ones through the socket, so that an idle pooled
#: connection never holds more than SHARED_MAX of memory.
SHARED_MIN = 64 * 1024
SHARED_MAX = 16 * 1024 * 1024
#: Frames about shared memory: its file descriptor rides along (SCM_RIGHTS).
_FDS_SPACE = socket.CMSG_SPACE(struct.calcsize("i"))


class SharedBuffer:
    """Memory a front-end process and a worker on the same machine share
    for one Unix-socket connection (``memfd_create``, passed once over the
    socket): a request's tensors are copied into it instead of through the
    socket, and the worker's inputs are views of it. A connection carries
    one request at a time, so the front end writes it only while the
    worker does not read it. Never closed explicitly (views may outlive the
    connection); the memory goes when the last view does."""

    __slots__ = ("size", "view")

    def __init__(self, fd: int, size: int):
        import mmap

        self.size = size
        self.view = memoryview(mmap.mmap(fd, size))

    @classmethod
    def create(cls, size: int) -> tuple[SharedBuffer, int]:
        """A new buffer of ``size`` bytes and its file descriptor (to send, then close)."""
        fd = os.memfd_create("modelhost-frame", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            return cls(fd, size), fd
        except BaseException:
            os.close(fd)
            raise

    def fits(self, nbytes: int) -> bool:
        return nbytes <= self.size


def send_shared(sock: socket.socket, fd: int, size: int) -> None:
    """Announce a connection's (new) shared memory: a frame ``{"shared":
    size}`` with the descriptor attached."""
    data = b"".join(bytes(b) for b in encode({"shared": size}))
    sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))])


#: Bytes a connection reads at once: a small frame arrives in one ``recv``.
SCRATCH = 64 * 1024


class Reader:
    """Reads frames from one connection.

    One ``recv`` of up to :data:`SCRATCH` bytes usually holds a whole small
    frame (and the rest of a large one is read straight into its buffer).
    Resumable: a ``recv`` that times out (``BlockingIOError``, from the
    socket's SO_RCVTIMEO) leaves what was read in place for the next call.
    """

    def __init__(self, sock: socket.socket, limit: int, fds: bool = False):
        """``fds``: also receive file descriptors sent with a frame (a
        worker's Unix-socket connections: :func:`send_shared`), collected in
        :attr:`fds` for the caller to take."""
        self.sock = sock
        self.limit = limit
        self.fds: list[int] | None = [] if fds else None
        self._scratch = bytearray(SCRATCH)
        self._view = memoryview(self._scratch)
        self._start = self._end = 0  # buffered, not yet consumed: [start, end)
        self._pending = None  # (body view, bytes received, header length) of a frame being read

    @property
    def partial(self) -> bool:
        """Whether part of a frame has arrived."""
        return self._pending is not None or self._end > self._start

    def _fill(self) -> None:
        if self._start == self._end:
            self._start = self._end = 0
        elif self._end == len(self._scratch):
            remaining = self._end - self._start
            self._view[:remaining] = self._view[self._start : self._end]
            self._start, self._end = 0, remaining
        if self.fds is None:
            n = self.sock.recv_into(self._view[self._end :])
        else:
            n, ancillary, _, _ = self.sock.recvmsg_into([self._view[self._end :]], _FDS_SPACE)
            for level, kind, data in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    usable = len(data) - len(data) % 4
                    self.fds.extend(struct.unpack(f"{usable // 4}i", data[:usable]))
        if n == 0:
            raise FrameError(
                "the connection closed in the middle of a frame" if self.partial else "the connection closed"
            )
        self._end += n

    def frame(self) -> tuple[dict, memoryview]:
        """The next frame: (header, body: the whole frame, whose numeric
        tensors :func:`tensors` views). Raises FrameError when the connection
        closes or the frame is malformed or larger than the limit."""
        if self._pending is None:
            while self._end - self._start < PREFIX.size:
                self._fill()
            body_length, header_length = PREFIX.unpack_from(self._scratch, self._start)
            total = body_length + 4
            if total > self.limit or header_length > min(MAX_HEADER, body_length - 4):
                raise FrameError(f"a frame of {body_length} bytes (header {header_length}) is over the limit")
            view = memoryview(np.empty(total, dtype=np.uint8)).cast("B")  # not zero-filled: overwritten
            have = min(self._end - self._start, total)
            view[:have] = self._view[self._start : self._start + have]
            self._start += have
            self._pending = (view, have, header_length)
        view, got, header_length = self._pending
        while got < len(view):
            n = self.sock.recv_into(view[got:])
            if n == 0:
                raise FrameError("the connection closed in the middle of a frame")
            got += n
            self._pending = (view, got, header_length)
        self._pending = None
        try:
            header = msgpack.unpackb(view[PREFIX.size : PREFIX.size + header_length], raw=False, strict_map_key=False)
        except Exception as exc:
            raise FrameError(f"a frame header is not msgpack: {exc}") from None
        if not isinstance(header, dict):
            raise FrameError("a frame header is not a map")
        return header, view


def tensors(
    header: dict, body: memoryview, where: str = "frame", shared: SharedBuffer | None = None
) -> dict[str, np.ndarray]:
    """The tensors of a received frame by name (numeric ones are views of
    ``body``, or of ``shared`` for a frame whose tensors are there).

    Raises InvalidInput for a tensor that does not fit its description (or
    a frame that names shared memory the connection does not have).
    """
    out = {}
    if header.get("shared"):
        if shared is None:
            raise InvalidInput(f"{where}: its tensors are in shared memory this connection does not have")
        body, start = shared.view, 0
    else:
        start = data_start(PREFIX.unpack_from(body)[1])
    end = len(body)
    for name, kind, shape, relative, nbytes in header.get("tensors", ()):
        offset = start + relative
        if relative < 0 or nbytes < 0 or offset + nbytes > end:
            raise InvalidInput(f"{where}: tensor '{name}' lies outside the frame")
        count = 1
        for dim in shape:
            count *= dim
        if kind == "bytes":
            array = bytes_codec.deserialize(body[offset : offset + nbytes], count, f"{where} tensor '{name}'")
        else:
            dtype = np.dtype(kind)
            if dtype.kind not in "biufc" or count * dtype.itemsize != nbytes:
                raise InvalidInput(f"{where}: tensor '{name}' has {nbytes} bytes for {count} x {kind}")
            array = np.frombuffer(body, dtype=dtype, count=count, offset=offset)
        out[name] = array.reshape(shape)
    return out
