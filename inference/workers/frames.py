"""Frames of the worker link: a typed header and raw tensor bytes.

Between a front-end process and an inference worker every message is one
frame::

    u32 body length | u32 header length | header (msgpack) | pad | tensor | pad | tensor ...

All integers little-endian. The header is one message of
:mod:`inference.workers.messages`; its ``tensors`` list each tensor's name,
dtype (a numpy type string such as ``"<f4"``, or ``"bytes"``: the binary
tensor data layout, a 4-byte little-endian length before each element),
shape, offset (16-byte aligned, from :func:`data_start`) and size. Numeric
tensors are sent straight from their memory (``sendmsg`` with one buffer per
tensor on a Unix socket; one TLS record stream across machines) and
received into one buffer that they are then views of: one copy into the
transport and one out of it, no base64 and no pickle; nothing in a frame
can make the receiver run code. On one machine a request's tensors may lie
in memory the connection's two ends share instead (:class:`SharedBuffer`,
announced by a :class:`~inference.workers.messages.ShareMemory` frame with
its sealed descriptor attached; the request then says ``shared`` and its
offsets are from that memory's start).
"""

from __future__ import annotations

import fcntl
import mmap
import os
import socket
import ssl
import struct
from collections.abc import Callable

import numpy as np

from inference.codecs import bytes as bytes_codec
from inference.protocol.errors import InvalidInput
from inference.workers import messages

PREFIX = struct.Struct("<II")
ALIGN = 16
MAX_HEADER = 1 << 20
_PAD = bytes(ALIGN)


class FrameError(ConnectionError):
    """The peer closed the connection or sent something that is not a frame."""


class BadHeader(InvalidInput):
    """A whole frame arrived whose header is not a message the receiver
    takes (wrong types, a negative size, an unknown kind): the connection
    stays usable, the request is answered INVALID_ARGUMENT."""


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


def _describe(tensors) -> tuple[list[messages.TensorInfo], list, int]:
    """Each tensor's description at aligned offsets from 0, its bytes, and
    the bytes they take together."""
    described, datas = [], []
    offset = 0
    for name, array in tensors:
        kind, data = _tensor_buffer(array)
        offset += -offset % ALIGN
        described.append(messages.TensorInfo(name, kind, list(array.shape), offset, len(data)))
        datas.append(data)
        offset += len(data)
    return described, datas, offset


def encode(message, tensors=(), shared: Callable[[int], SharedBuffer | None] | None = None) -> list:
    """The buffers of one frame (for :func:`send`): ``message`` (a message of
    :mod:`~inference.workers.messages`; its ``tensors`` field is filled in)
    plus the ``tensors`` ((name, array) pairs). ``shared``: for a request
    whose numeric tensors take SHARED_MIN..SHARED_MAX bytes (no BYTES), the
    connection's shared memory of at least that many bytes (or None); the
    tensors' bytes are then copied there, at offsets from its start, and
    the frame (``shared`` set) carries only the header."""
    described, datas, offset = _describe(tensors)
    if described:
        message.tensors = described
    memory = None
    if shared is not None and SHARED_MIN <= offset <= SHARED_MAX and all(e.dtype != "bytes" for e in described):
        memory = shared(offset)
    if memory is not None:
        for entry, data in zip(described, datas):
            memory.view[entry.offset : entry.offset + entry.nbytes] = data
        message.shared = True
        head = messages.encode(message)
        return [PREFIX.pack(PREFIX.size + len(head) - 4, len(head)), head]
    head = messages.encode(message)
    start = data_start(len(head))
    end = start + offset if described else PREFIX.size + len(head)
    buffers = [PREFIX.pack(end - 4, len(head)), head]
    position = PREFIX.size + len(head)
    for entry, data in zip(described, datas):
        pad = start + entry.offset - position
        if pad:
            buffers.append(_PAD[:pad])
        if len(data):
            buffers.append(data)
        position = start + entry.offset + len(data)
    return buffers


#: Buffers smaller than this are joined before a TLS send (one record, not one per buffer).
_COALESCE = 16 * 1024


def views(buffers: list, tls: bool = False) -> list[memoryview]:
    """Byte views of a frame's buffers (for :func:`send_views`); for a TLS
    socket, runs of small buffers joined into one."""
    out = [memoryview(b).cast("B") if not isinstance(b, bytes) else memoryview(b) for b in buffers]
    if not tls:
        return out
    joined: list[memoryview] = []
    small: list[memoryview] = []
    for view in out:
        if len(view) < _COALESCE:
            small.append(view)
            continue
        if small:
            joined.append(memoryview(b"".join(small)))
            small = []
        joined.append(view)
    if small:
        joined.append(memoryview(b"".join(small)))
    return joined


def send(sock: socket.socket, buffers: list) -> None:
    """Send every buffer of a frame on a blocking socket."""
    send_views(sock, views(buffers, isinstance(sock, ssl.SSLSocket)))


def send_views(sock: socket.socket, views: list[memoryview]) -> None:
    """Send byte views, removing what was sent from ``views`` as it goes.
    When the socket would block (BlockingIOError, TimeoutError, SSL's
    want-read/write), that propagates and ``views`` holds what is left to
    send: call again with it (TLS wants the same buffer again, which it is)."""
    if isinstance(sock, ssl.SSLSocket):  # no sendmsg on TLS; a TLS send is all or nothing
        blocking = sock.gettimeout() is None
        while views:
            if blocking:
                sock.sendall(views[0])
            else:
                _send_all_or_raise(sock, views[0])
            views.pop(0)
        return
    while views:
        sent = sock.sendmsg(views[:512])  # IOV_MAX is 1024 on Linux
        while sent:
            if sent >= len(views[0]):
                sent -= len(views[0])
                views.pop(0)
            else:
                views[0] = views[0][sent:]
                sent = 0


def _send_all_or_raise(sock: ssl.SSLSocket, view: memoryview) -> None:
    """One TLS write of ``view`` on a socket with a timeout or non-blocking:
    OpenSSL writes it whole or not at all (it keeps what it took and wants
    the same buffer again after a would-block)."""
    sent = sock.send(view)
    if sent != len(view):  # not with OpenSSL's default modes; never silently lose bytes
        raise FrameError(f"a TLS send took {sent} of {len(view)} bytes")


#: Requests whose tensors take at least SHARED_MIN and at most SHARED_MAX
#: bytes go through the connection's shared memory (front end and worker on
#: one machine); larger ones through the socket, so that an idle pooled
#: connection never holds more than SHARED_MAX of memory.
SHARED_MIN = 64 * 1024
SHARED_MAX = 16 * 1024 * 1024
#: Frames about shared memory: its file descriptor rides along (SCM_RIGHTS).
_FDS_SPACE = socket.CMSG_SPACE(struct.calcsize("i"))
#: A shared memory's size can never change once announced (a worker reading
#: past the end of a shrunk file would die of SIGBUS).
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW


class SharedBuffer:
    """Memory a front-end process and a worker on the same machine share
    for one Unix-socket connection (``memfd_create``, sealed against
    shrinking and growing, passed once over the socket): a request's
    tensors are copied into it instead of through the socket, and the
    worker's inputs are views of it. A connection carries one request at a
    time, so the front end writes it only while the worker does not read
    it. Never closed explicitly (views may outlive the connection); the
    memory goes when the last view does."""

    __slots__ = ("size", "view")

    def __init__(self, fd: int, size: int):
        self.size = size
        self.view = memoryview(mmap.mmap(fd, size))

    @classmethod
    def create(cls, size: int) -> tuple[SharedBuffer, int]:
        """A new sealed buffer of ``size`` bytes and its file descriptor (to
        send, then close)."""
        fd = os.memfd_create("modelhost-frame", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS | fcntl.F_SEAL_SEAL)
            return cls(fd, size), fd
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def attach(cls, fd: int, size: int, limit: int) -> SharedBuffer:
        """The buffer a peer announced: ``fd`` must be a memfd of at least
        ``size`` (at most ``limit``) bytes sealed against shrinking and
        growing. Raises ValueError (or OSError) otherwise; ``fd`` stays the
        caller's to close."""
        if not 0 < size <= limit:
            raise ValueError(f"{size} bytes is not within 1..{limit}")
        try:
            seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        except OSError:
            raise ValueError("not a memfd (it cannot be sealed)") from None
        if seals & _SEALS != _SEALS:
            raise ValueError("the memfd is not sealed against shrinking and growing")
        if os.fstat(fd).st_size < size:
            raise ValueError(f"the memfd holds {os.fstat(fd).st_size} bytes, not {size}")
        return cls(fd, size)

    def fits(self, nbytes: int) -> bool:
        return nbytes <= self.size


def send_shared(sock: socket.socket, fd: int, size: int) -> None:
    """Announce a connection's (new) shared memory: a ShareMemory frame
    with the descriptor attached."""
    data = b"".join(bytes(b) for b in encode(messages.ShareMemory(size)))
    sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))])


#: Bytes a connection reads at once: a small frame arrives in one ``recv``.
SCRATCH = 64 * 1024


class Reader:
    """Reads frames from one connection, decoding each header with
    ``decoder`` (:data:`messages.to_worker` or :data:`messages.to_front_end`).

    One ``recv`` of up to :data:`SCRATCH` bytes usually holds a whole small
    frame (and the rest of a large one is read straight into its buffer).
    Resumable: a ``recv`` that would block (BlockingIOError from the socket's
    SO_RCVTIMEO or a non-blocking socket, TimeoutError, SSL's want-read)
    leaves what was read in place for the next call.
    """

    def __init__(self, sock: socket.socket, limit: int, decoder, fds: bool = False):
        """``fds``: also receive file descriptors sent with a frame (a
        worker's Unix-socket connections: :func:`send_shared`), collected in
        :attr:`fds` for the caller to take (and close)."""
        self.sock = sock
        self.limit = limit
        self.decoder = decoder
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

    def close_fds(self) -> None:
        """Close every descriptor received and not taken."""
        while self.fds:
            os.close(self.fds.pop())

    def frame(self):
        """The next frame: (message, body: the whole frame, whose numeric
        tensors :func:`tensors` views). Raises FrameError when the connection
        closes or the frame is larger than the limit (the connection is then
        unusable), BadHeader when a whole frame arrived whose header is not
        a message of the decoder's kinds (the next frame can be read)."""
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
            message = self.decoder.decode(view[PREFIX.size : PREFIX.size + header_length])
        except messages.DecodeError as exc:
            raise BadHeader(f"a malformed frame: {exc}") from None
        return message, view


def tensors(message, body: memoryview, where: str = "frame", shared: SharedBuffer | None = None) -> dict:
    """The tensors of a received frame by name (numeric ones are views of
    ``body``, or of ``shared`` for a frame whose tensors are there).

    Raises InvalidInput for a tensor that does not fit its description (or
    a frame that names shared memory the connection does not have).
    """
    out = {}
    if getattr(message, "shared", False):
        if shared is None:
            raise InvalidInput(f"{where}: its tensors are in shared memory this connection does not have")
        body, start = shared.view, 0
    else:
        start = data_start(PREFIX.unpack_from(body)[1])
    end = len(body)
    for info in message.tensors:
        offset = start + info.offset
        if offset + info.nbytes > end:
            raise InvalidInput(f"{where}: tensor '{info.name}' lies outside the frame")
        out[info.name] = tensor_in(body, offset, info, where)
    return out


def tensor_in(buffer, offset: int, info, where: str = "frame") -> np.ndarray:
    """The tensor ``info`` describes (a TensorInfo or RegionTensor: name,
    dtype, shape, nbytes) at ``offset`` of ``buffer``, which holds it: a view
    for numeric dtypes. Raises InvalidInput when it does not fit its
    description."""
    name, kind, shape, nbytes = info.name, info.dtype, info.shape, info.nbytes
    count = 1
    for dim in shape:
        count *= dim
    if kind == "bytes":
        array = bytes_codec.deserialize(buffer[offset : offset + nbytes], count, f"{where} tensor '{name}'")
    else:
        try:
            dtype = np.dtype(kind)
        except (TypeError, ValueError):
            raise InvalidInput(f"{where}: tensor '{name}' has an unknown dtype {kind!r}") from None
        if dtype.kind not in "biufc" or count * dtype.itemsize != nbytes:
            raise InvalidInput(f"{where}: tensor '{name}' has {nbytes} bytes for {count} x {kind}")
        array = np.frombuffer(buffer, dtype=dtype, count=count, offset=offset)
    return array.reshape(shape)


def tensor_bytes(array: np.ndarray) -> tuple[str, memoryview | bytes]:
    """An output's dtype string and binary form (as frames carry tensors)."""
    return _tensor_buffer(array)
