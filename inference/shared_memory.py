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
- :meth:`RegionRegistry.view` maps a region (``mmap`` of ``/dev/shm/<key>``, opened with
  ``O_NOFOLLOW``, a regular file whose size covers the region) and returns
  the checked ``[offset, offset + byte_size)`` slice. Mappings are cached per
  registration and process; a request holds its slice, so a region
  unregistered while a request uses it stays mapped for that request. The
  object's size is checked again on every use (a client that shrank it
  would otherwise make a read past its end fault the process).

Tensors in regions (the request parameters that name them, reading and
writing their bytes) are :mod:`inference.region_tensors`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import mmap
import os
import stat
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from inference.protocol.errors import InferenceError, InvalidInput
from inference.region_tensors import ObjectSpan, TensorReference, check_name, non_negative, object_path

#: Regions one owner may have registered at once.
MAX_REGIONS = 256
#: Mappings a process keeps open (least recently used ones are dropped).
CACHED_MAPPINGS = 64
#: How often a process drops its mappings of regions unregistered elsewhere (seconds), so that
#: an object the client removed is freed (a mapping keeps its memory allocated).
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
    name apart (a process's cached mapping follows it)."""

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


class _Mapping:
    """An open shared-memory object mapped from 0 to the region's end (the
    descriptor stays open to check its size on every use), for ``region``."""

    __slots__ = ("end", "fd", "map", "region")

    def __init__(self, region: Region):
        self.region = region
        path = object_path(region.key)
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise InvalidInput(f"Unable to open shared memory region: '{region.key}' ({exc.strerror})") from None
        try:
            info = os.fstat(fd)
            end = region.offset + region.byte_size
            if not stat.S_ISREG(info.st_mode):
                raise InvalidInput(f"Invalid shared memory region: '{region.key}' (not a shared memory object)")
            if info.st_size < end:
                raise InvalidInput(
                    f"failed to register shared memory region '{region.name}': invalid args "
                    f"(offset {region.offset} + byte_size {region.byte_size} is past the end of "
                    f"'{region.key}', {info.st_size} bytes)"
                )
            self.map = mmap.mmap(fd, end) if end else None
        except BaseException:
            os.close(fd)
            raise
        self.fd, self.end = fd, end

    def check(self, region: Region) -> None:
        if os.fstat(self.fd).st_size < self.end:
            raise InvalidInput(f"shared memory region '{region.name}': its object '{region.key}' was made smaller")

    def __del__(self):
        fd, self.fd = getattr(self, "fd", -1), -1
        if fd >= 0:
            os.close(fd)  # the map itself closes when its last view goes


class RegionRegistry:
    """The machine's registered regions (see the module doc). Thread-safe;
    ``directory`` None keeps them in this process's memory."""

    def __init__(self, directory: str | Path | None = None):
        self.directory = Path(directory) if directory is not None else None
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
        self._memory: dict[tuple[str, str], Region] = {}
        self._lock = threading.Lock()
        self._maps: dict[str, _Mapping] = {}  # registration id -> mapping, least recently used first
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
        mapping = _Mapping(region)  # the object exists and holds the region
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
        self._remember(region.id, mapping)
        return region

    def unregister(self, owner: str, name: str | None = None) -> list[Region]:
        """Unregister the owner's region ``name``, or all of the owner's
        regions (``name`` empty); an unknown name is no error (as Triton).
        Requests that hold a region's mapping keep it. Returns the regions
        unregistered."""
        with self._exclusive():
            gone = [r for r in self._all() if r.owner == owner and (not name or r.name == name)]
            for region in gone:
                if self.directory is None:
                    self._memory.pop((owner, region.name), None)
                else:
                    self._file(owner, region.name).unlink(missing_ok=True)
        with self._lock:
            for region in gone:
                self._maps.pop(region.id, None)
        return gone

    # -- the data -------------------------------------------------------------
    def prune(self) -> None:
        """Drop this process's mappings of regions no longer registered (by
        any process of the machine): requests still using one keep it, and
        the object's memory is freed once the client removed it too."""
        self._pruned = time.monotonic()
        with self._lock:
            cached = list(self._maps.values())
        stale = []
        for mapping in cached:
            region = mapping.region
            try:
                current = self.get(region.owner, region.name)
            except RegionNotFound:
                current = None
            if current is None or current.id != region.id:
                stale.append(region.id)
        with self._lock:
            for key in stale:
                self._maps.pop(key, None)

    def _remember(self, key: str, mapping: _Mapping) -> None:
        with self._lock:
            self._maps[key] = mapping
            while len(self._maps) > CACHED_MAPPINGS:
                self._maps.pop(next(iter(self._maps)))

    def view(self, owner: str, reference: TensorReference, where: str) -> memoryview:
        """The bytes a tensor reference names, as a writable view of the
        mapping (it keeps the mapping open while it lives). Raises
        RegionNotFound as InvalidInput (a request's mistake), InvalidInput for
        a span outside the region or an object made smaller than it."""
        return self.span(owner, reference, where)[1]

    def span(self, owner: str, reference: TensorReference, where: str) -> tuple[ObjectSpan, memoryview]:
        """:meth:`view`, and where its bytes lie in the shared-memory object
        (for a worker on this machine that maps the object itself)."""
        if time.monotonic() - self._pruned >= PRUNE_SECONDS:
            self.prune()
        try:
            region = self.get(owner, reference.region)
        except RegionNotFound as exc:
            raise InvalidInput(f"{where}: {exc.message}") from None
        check_span(region, reference.offset, reference.byte_size, where)
        with self._lock:
            mapping = self._maps.pop(region.id, None)
            if mapping is not None:
                self._maps[region.id] = mapping  # most recently used
        if mapping is None:
            mapping = _Mapping(region)
            self._remember(region.id, mapping)
        mapping.check(region)
        start = region.offset + reference.offset
        located = ObjectSpan(region.key, start, reference.byte_size)
        if not reference.byte_size:
            return located, memoryview(b"")
        return located, memoryview(mapping.map)[start : start + reference.byte_size]
