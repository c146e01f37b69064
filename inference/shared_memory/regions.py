"""Triton's system shared-memory extension: regions of ``/dev/shm`` objects
that clients register by name and then name in requests instead of sending
tensor bytes.

Spec: https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_shared_memory.md

- :class:`RegionRegistry` keeps the registrations of one machine, so that
  every server process (REST and gRPC) sees a registration made through any
  of them at once: one small JSON file per region under
  ``$VAR_DIR/run/shm/`` (written whole and renamed into place, changed under
  an exclusive ``flock``), or a dict in memory without a directory (tests).
  Regions are machine-local by nature: a client on another machine cannot
  share memory with this one.
- A region belongs to an **owner** (``team:<name>``, ``user:<id>`` or
  ``anonymous``): its names are the owner's own namespace, so another owner
  can neither see, use nor unregister it; and a ``/dev/shm`` key registered
  by one owner cannot be registered by another (which could otherwise read
  and write the first owner's tensors).
- :meth:`RegionRegistry.span` checks a tensor's ``[offset, offset +
  byte_size)`` against its region and returns it as a
  :class:`~inference.shared_memory.region_io.Span` of the region's object, open
  (``/dev/shm/<key>``, with ``O_NOFOLLOW``, a regular file), never mapped:
  its bytes are read with ``preadv`` into buffers of ours and written with
  ``pwrite`` (:mod:`inference.shared_memory.region_io`), and the object's size is checked
  against the region on every use, so a client that shrinks its object
  gets a 400 (INVALID_ARGUMENT) naming the region, never a server process
  killed by SIGBUS. Open objects are cached per registration and process;
  a request holds its span, so a region unregistered while a request uses
  it stays open for that request.

Tensors in regions (the request parameters that name them, reading and
writing their bytes) are :mod:`inference.shared_memory.region_tensors`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from inference.protocol.errors import InferenceError, InvalidInput, RegionNotOpened
from inference.shared_memory.region_io import ObjectFile, Span
from inference.shared_memory.region_tensors import TensorReference, check_name, non_negative, object_path

#: Regions one owner may have registered at once.
MAX_REGIONS = 256
#: Objects a process keeps open (least recently used ones are closed).
CACHED_OBJECTS = 64
#: How often a process closes its objects of regions unregistered elsewhere (seconds), so that
#: an object the client removed is freed (an open descriptor keeps its memory allocated).
PRUNE_SECONDS = 1.0
CUDA_UNSUPPORTED = "CUDA shared memory is not supported by this server"


class RegionNotFound(InferenceError):
    """No region of that name for the caller (HTTP 404, gRPC NOT_FOUND)."""

    code = "NOT_FOUND"
    http_status = 404
    grpc_status = "NOT_FOUND"


@dataclass(frozen=True)
class Region:
    """One registered region: ``byte_size`` bytes of the shared-memory object
    ``key`` from byte ``offset`` on; ``id`` tells registrations of the same
    name apart (a process's cached open object follows it)."""

    name: str
    key: str
    offset: int
    byte_size: int
    owner: str
    id: str


def check_span(region: Region, offset: int, byte_size: int, where: str) -> None:
    """Raise InvalidInput unless ``[offset, offset + byte_size)`` lies within
    the region (Triton's texts: "Invalid offset ...", "Invalid offset + byte
    size ...")."""
    if offset > region.byte_size or (offset == region.byte_size and byte_size):
        raise InvalidInput(
            f"{where}: Invalid offset for shared memory region: '{region.name}' "
            f"(offset {offset}, the region holds {region.byte_size} bytes)"
        )
    if offset + byte_size > region.byte_size:
        raise InvalidInput(
            f"{where}: Invalid offset + byte size for shared memory region: '{region.name}' "
            f"({offset} + {byte_size} bytes, the region holds {region.byte_size} bytes)"
        )


def _open(region: Region) -> ObjectFile:
    """The region's object, open, after checking that it holds the region
    (Triton's register text). Raises InvalidInput (RegionNotOpened: no such object)."""
    file = ObjectFile(object_path(region.key), region.key, RegionNotOpened)
    size = file.size()
    if size < region.offset + region.byte_size:
        raise InvalidInput(
            f"failed to register shared memory region '{region.name}': invalid args "
            f"(offset {region.offset} + byte_size {region.byte_size} is past the end of "
            f"'{region.key}', {size} bytes)"
        )
    return file


class RegionRegistry:
    """The machine's registered regions (see the module doc). Thread-safe;
    ``directory`` None keeps them in this process's memory."""

    def __init__(self, directory: str | Path | None = None):
        self.directory = Path(directory) if directory is not None else None
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
        self._memory: dict[tuple[str, str], Region] = {}
        self._lock = threading.Lock()
        #: registration id -> (the region, its open object), least recently used first
        self._objects: dict[str, tuple[Region, ObjectFile]] = {}
        self._pruned = time.monotonic()

    # -- the registrations ----------------------------------------------------
    def _file(self, owner: str, name: str) -> Path:
        digest = hashlib.sha256(f"{owner}\0{name}".encode("utf-8", "surrogatepass")).hexdigest()[:40]
        return self.directory / f"{digest}.json"

    def _read(self, path: Path) -> Region | None:
        try:
            return Region(**json.loads(path.read_bytes()))
        except (OSError, ValueError, TypeError):
            return None  # removed meanwhile

    def _all(self) -> list[Region]:
        if self.directory is None:
            return list(self._memory.values())
        found = (self._read(path) for path in self.directory.glob("*.json"))
        return [region for region in found if region is not None]

    @contextlib.contextmanager
    def _exclusive(self):
        """The machine-wide write lock (this process's lock, then the directory's ``flock``)."""
        with self._lock:
            if self.directory is None:
                yield
                return
            fd = os.open(self.directory / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # releases the flock

    def get(self, owner: str, name: str) -> Region:
        """The owner's region ``name``. Raises RegionNotFound (Triton's text)."""
        if self.directory is None:
            region = self._memory.get((owner, name))
        else:
            region = self._read(self._file(owner, name))
        if region is None or region.owner != owner or region.name != name:
            raise RegionNotFound(f"Unable to find system shared memory region: '{name}'")
        return region

    def status(self, owner: str, name: str | None = None) -> list[Region]:
        """The owner's regions, by name (``name``: that one only; raises RegionNotFound)."""
        if name:
            return [self.get(owner, name)]
        return sorted((r for r in self._all() if r.owner == owner), key=lambda r: r.name)

    def register(self, owner: str, name: str, key: str, offset: int, byte_size: int) -> Region:
        """Register ``byte_size`` bytes of the object ``key`` from ``offset``
        as the owner's region ``name``, after checking that the object exists
        and holds them. Raises InvalidInput: a name the owner has registered
        already (Triton's "shared memory region '<name>' already in
        manager"), a key another owner registered, a bad key, offset or size,
        more than MAX_REGIONS regions."""
        check_name(name, "the region name")
        object_path(key)
        non_negative(offset, "'offset'")
        non_negative(byte_size, "'byte_size'")
        region = Region(name, key, offset, byte_size, owner, uuid.uuid4().hex)
        file = _open(region)  # the object exists and holds the region
        with self._exclusive():
            regions = self._all()
            if any(r.owner == owner and r.name == name for r in regions):
                raise InvalidInput(f"shared memory region '{name}' already in manager")
            if any(r.key.lstrip("/") == key.lstrip("/") and r.owner != owner for r in regions):
                raise InvalidInput(
                    f"failed to register shared memory region '{name}': the key '{key}' is registered by "
                    "another team or caller"
                )
            if sum(r.owner == owner for r in regions) >= MAX_REGIONS:
                raise InvalidInput(f"failed to register shared memory region '{name}': {MAX_REGIONS} regions at most")
            if self.directory is None:
                self._memory[(owner, name)] = region
            else:
                path = self._file(owner, name)
                temporary = path.with_suffix(f".{os.getpid()}.tmp")
                temporary.write_text(json.dumps(asdict(region)))
                os.replace(temporary, path)
        self._remember(region, file)
        return region

    def unregister(self, owner: str, name: str | None = None) -> list[Region]:
        """Unregister the owner's region ``name``, or all of the owner's
        regions (``name`` empty); an unknown name is no error (as Triton).
        Requests that hold a region's span keep its object open. Returns
        the regions unregistered."""
        with self._exclusive():
            gone = [r for r in self._all() if r.owner == owner and (not name or r.name == name)]
            for region in gone:
                if self.directory is None:
                    self._memory.pop((owner, region.name), None)
                else:
                    self._file(owner, region.name).unlink(missing_ok=True)
        with self._lock:
            for region in gone:
                self._objects.pop(region.id, None)
        return gone

    # -- the data -------------------------------------------------------------
    def prune(self) -> None:
        """Close this process's objects of regions no longer registered (by
        any process of the machine): requests still using one keep it, and
        the object's memory is freed once the client removed it too."""
        self._pruned = time.monotonic()
        with self._lock:
            cached = [region for region, _file in self._objects.values()]
        stale = []
        for region in cached:
            try:
                current = self.get(region.owner, region.name)
            except RegionNotFound:
                current = None
            if current is None or current.id != region.id:
                stale.append(region.id)
        with self._lock:
            for key in stale:
                self._objects.pop(key, None)

    def _remember(self, region: Region, file: ObjectFile) -> None:
        with self._lock:
            self._objects[region.id] = (region, file)
            while len(self._objects) > CACHED_OBJECTS:
                self._objects.pop(next(iter(self._objects)))

    def span(self, owner: str, reference: TensorReference, where: str) -> Span:
        """The bytes a tensor reference names, checked against its region
        and the region against its object's current size: a
        :class:`~inference.shared_memory.region_io.Span` to read or write them (it keeps
        the object open while it lives), labelled "<where>: shared memory
        region '<name>'". Raises InvalidInput: an unknown region (a
        request's mistake: Triton's text), a span outside the region, an
        object smaller than the region (it shrank)."""
        if time.monotonic() - self._pruned >= PRUNE_SECONDS:
            self.prune()
        try:
            region = self.get(owner, reference.region)
        except RegionNotFound as exc:
            raise InvalidInput(f"{where}: {exc.message}") from None
        check_span(region, reference.offset, reference.byte_size, where)
        with self._lock:
            cached = self._objects.pop(region.id, None)
            if cached is not None:
                self._objects[region.id] = cached  # most recently used
        if cached is None:
            file = ObjectFile(object_path(region.key), region.key)
            self._remember(region, file)
        else:
            file = cached[1]
        end = region.offset + region.byte_size
        located = Span(file, region.offset + reference.offset, reference.byte_size, end,
                       f"{where}: shared memory region '{region.name}'")  # fmt: skip
        located.check()
        return located
