"""The typed messages of the worker link, one module for both ends.

A front-end process and an inference worker exchange frames
(:mod:`inference.workers.frames`): a msgpack header, which is one of the
messages below, followed by raw tensor bytes. The worker announces itself
in Redis with an :class:`Announcement` (JSON). Every message is a
``msgspec.Struct``: decoding checks each field's type and range (a
negative shape, a string where a number belongs, an unknown message kind
are :class:`msgspec.ValidationError`, which the receiver answers with
INVALID_ARGUMENT), and it is about twice as fast as packing and unpacking
dicts with msgpack (measured: 0.34 us to encode and 0.66 us to decode a
request header, against 1.4 us each).

Front end -> worker: :class:`ShareMemory` (a Unix-socket connection's shared
memory, its descriptor attached), :class:`RunRequest`, :class:`SegmentRequest`
(steps of an ensemble run together).
Worker -> front end: :class:`Hello` (once, when the worker accepted the
connection; an :class:`ErrorAnswer` instead when it refuses it, e.g. at its
connection limit for that front end), :class:`RunAnswer`,
:class:`SegmentAnswer` or :class:`ErrorAnswer` (one per request), and
:class:`Draining` (once, last: the worker takes no new request on this
connection and closes it).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Positive = Annotated[int, msgspec.Meta(gt=0)]


class TensorInfo(msgspec.Struct, array_like=True, frozen=True):
    """Where one tensor lies in a frame: ``dtype`` is a numpy type string
    (``"<f4"``) or ``"bytes"`` (BYTES: a 4-byte little-endian length before
    each element); ``offset`` and ``nbytes`` in bytes, ``offset`` from the
    start of the frame's tensor data (or of the shared memory)."""

    name: str
    dtype: str
    shape: list[NonNegative]
    offset: NonNegative
    nbytes: NonNegative


class RegionTensor(msgspec.Struct, array_like=True, frozen=True):
    """A tensor in a client's shared-memory region (Triton's system
    shared-memory extension), for a worker on the front end's machine to read
    and write itself: ``nbytes`` bytes of the ``/dev/shm`` object ``key`` from byte
    ``offset`` of the object; an input's ``dtype`` (numeric, as in
    :class:`TensorInfo`) and ``shape``; for an output, the room it may take
    (``dtype`` "", ``shape`` [])."""

    name: str
    dtype: str
    shape: list[NonNegative]
    key: str
    offset: NonNegative
    nbytes: NonNegative


class Hello(msgspec.Struct, tag="hello"):
    """The worker accepted the connection (its TLS handshake verified the
    front end's certificate, or the Unix socket's peer is this user)."""

    worker: str
    device: str


class Draining(msgspec.Struct, tag="draining"):
    """The worker is draining (told to stop): it answered every request it
    held on this connection and takes no new one; it closes the connection
    after this frame. A request the front end sent on it meanwhile was not
    run: it may go to another worker."""

    worker: str


class ShareMemory(msgspec.Struct, tag="shared"):
    """The connection's new shared memory of ``size`` bytes: one sealed
    memfd sent with this frame (SCM_RIGHTS)."""

    size: Positive


class Sequence(msgspec.Struct, array_like=True, frozen=True):
    """A request's place in a sequence (sequence batching): the correlation
    ID (an unsigned 64-bit integer or a string), whether it starts and ends
    the sequence, and whose sequence it is (the caller's team or user)."""

    corrid: NonNegative | str
    start: bool
    end: bool
    owner: str


class RunRequest(msgspec.Struct, tag="run", omit_defaults=True):
    """Run model version ``(model, version, sha256)`` on the frame's tensors
    (``rows``: the batch size, dimension 0; ``deadline``: seconds since the
    epoch; ``shared``: the tensors lie in the connection's shared memory;
    ``sequence``: its place in a sequence, for a model with sequence batching;
    ``regions``: inputs in clients' shared-memory regions, ``output_regions``:
    outputs to write into them, on a worker of the same machine only;
    ``priority`` and ``timeout_us``: the request's priority and timeout
    parameters, for a model with dynamic batching, 0 when not given;
    ``shadow``: a shadow copy of a live request, run only while the worker
    runs no other request, else answered QUEUE_FULL:
    :meth:`~inference.workers.server.runtime.WorkerRuntime.handle`)."""

    model: str
    version: Positive
    sha256: str
    outputs: list[str]
    rows: NonNegative
    deadline: float
    tensors: list[TensorInfo] = []
    shared: bool = False
    traceparent: str | None = None
    sequence: Sequence | None = None
    regions: list[RegionTensor] = []
    output_regions: list[RegionTensor] = []
    priority: NonNegative = 0
    timeout_us: NonNegative = 0
    shadow: bool = False


class RunAnswer(msgspec.Struct, tag="answer"):
    """A request's outputs (the frame's tensors) and how it ran: the batch it
    ran in, whether this request executed it, nanoseconds queued and run;
    ``written``: the outputs written into the request's ``output_regions``
    (their ``offset``: the object's, ``nbytes``: the bytes written)."""

    batch: NonNegative
    executed: bool
    queue_ns: NonNegative
    infer_ns: NonNegative
    tensors: list[TensorInfo] = []
    written: list[TensorInfo] = []


class SegmentStep(msgspec.Struct, array_like=True, frozen=True):
    """One step of a :class:`SegmentRequest`: model version ``(model,
    version, sha256)``; ``inputs``: its input name -> the segment tensor it
    reads; ``outputs``: its output name -> the segment tensor it writes."""

    model: str
    version: Positive
    sha256: str
    inputs: dict[str, str]
    outputs: dict[str, str]


class SegmentRequest(msgspec.Struct, tag="segment", omit_defaults=True):
    """Run consecutive steps of an ensemble in order on the worker
    (inference/ensembles/segments.py): the frame's tensors are the segment's
    inputs by tensor name; each step reads and writes segment tensors; the
    answer carries the tensors named in ``returns`` only (``deadline``:
    seconds since the epoch, for every step)."""

    steps: list[SegmentStep]
    returns: list[str]
    deadline: float
    tensors: list[TensorInfo] = []
    shared: bool = False
    traceparent: str | None = None


class StepRun(msgspec.Struct, array_like=True, frozen=True):
    """How one step of a segment ran, for its model's statistics: its
    inferences (``rows``), the batch it ran in and whether it executed it,
    nanoseconds queued, checking its inputs, running (queue included) and
    in all."""

    rows: NonNegative
    batch: NonNegative
    executed: bool
    queue_ns: NonNegative
    input_ns: NonNegative
    run_ns: NonNegative
    total_ns: NonNegative


class SegmentAnswer(msgspec.Struct, tag="segment_answer", omit_defaults=True):
    """A segment's answer: ``runs``, one per step that ran, in order; the
    frame's tensors (``returns``) when every step succeeded, else ``error``:
    the failure of the step after the last that ran."""

    runs: list[StepRun]
    tensors: list[TensorInfo] = []
    error: ErrorAnswer | None = None


class ErrorAnswer(msgspec.Struct, tag="error"):
    """A request failed: ``code`` is a protocol error category
    (:mod:`inference.protocol.errors`: INVALID_ARGUMENT, UNAVAILABLE, ...)."""

    code: str
    message: str


#: What a worker reads, and what a front end reads.
ToWorker = RunRequest | SegmentRequest | ShareMemory
ToFrontEnd = RunAnswer | SegmentAnswer | ErrorAnswer | Hello | Draining

_encoder = msgspec.msgpack.Encoder()
encode = _encoder.encode
to_worker = msgspec.msgpack.Decoder(ToWorker)
to_front_end = msgspec.msgpack.Decoder(ToFrontEnd)
#: What decoding a malformed message raises.
DecodeError = msgspec.DecodeError  # ValidationError is a subclass


class Announcement(msgspec.Struct, omit_defaults=True):
    """A worker's heartbeat (the JSON value of its Redis key, refreshed every
    second): where front ends reach it (``address``: host:port of its TLS
    listener, empty when it has none; ``unix``: its Unix socket, for front
    ends on the same ``machine``), its device and how busy it is (``busy``:
    requests held now; ``busy_fraction``: 0..1 over its last 10 s;
    ``connections``: front-end connections it holds); ``draining``: it was
    told to stop and takes no new request (front ends drop it at once).

    Nothing in it is trusted: a front end sends work only to a worker that
    proves itself on connection (TLS certificate of the deployment's CA, or
    a Unix socket whose peer is this user)."""

    device: str
    beat_ms: int = 0  # when this heartbeat was written (ms since the epoch)
    address: str = ""
    unix: str = ""
    machine: str = ""
    host: str = ""
    pid: int = 0
    busy: NonNegative = 0
    busy_fraction: float = 0.0
    served: NonNegative = 0
    connections: NonNegative = 0
    draining: bool = False
    rss_bytes: NonNegative = 0
    control: bool = True
    pool: str = ""
    providers: list[str] = []  # those its probe session got (session.get_providers()), not those asked for
    gpu_ordinal: int = -1  # a GPU worker's device_id in its process (its label is ``device``)


announcement_json = msgspec.json.Decoder(Announcement)
encode_json = msgspec.json.encode
