"""Registry change notices between the processes of one machine.

A :class:`ChangeBeacon` is an 8-byte counter in a memory-mapped file
(``$VAR_DIR/run/registry.changes``) shared by every process that uses the
same VAR_DIR: the REST workers and gRPC processes of one ``serve``, the
management commands run beside them, inference workers on the machine.
A process that commits a registry write bumps it before its call answers;
every server process reads it (one memory read, ~0.2 us) before each
registry lookup and rebuilds its snapshot first when it moved. So a change
(unload, load, delete, retire, relabel, a new default version, a new model)
is seen by every process of the machine before the call that made it
answers: read-your-writes, with no database query on the request path.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
import threading
from pathlib import Path

_COUNTER = struct.Struct("<Q")


class ChangeBeacon:
    """A counter shared through a memory-mapped file (created if missing)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        if os.fstat(self._fd).st_size < _COUNTER.size:
            os.ftruncate(self._fd, _COUNTER.size)
        self._map = mmap.mmap(self._fd, _COUNTER.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def read(self) -> int:
        """The current counter (a torn read can only look like a change)."""
        return _COUNTER.unpack_from(self._map)[0]

    def bump(self) -> int:
        """Advance the counter for every process of the machine; returns the new value."""
        # A lock on a descriptor of its own: flock excludes open file
        # descriptions, which threads and forked children would share.
        fd = os.open(self.path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            value = _COUNTER.unpack_from(self._map)[0] + 1
            _COUNTER.pack_into(self._map, 0, value)
            return value
        finally:
            os.close(fd)


_beacons: dict[Path, ChangeBeacon] = {}
_beacons_lock = threading.Lock()


def beacon_at(var_dir: str | Path) -> ChangeBeacon:
    """The process's beacon of the machine's VAR_DIR (one per directory)."""
    path = Path(var_dir).resolve() / "run" / "registry.changes"
    with _beacons_lock:
        beacon = _beacons.get(path)
        if beacon is None:
            beacon = _beacons[path] = ChangeBeacon(path)
        return beacon
