"""Statistics counters that every server process of a machine can read at once.

Each process owns one :class:`CounterTable`: a memory-mapped file in the
machine's statistics directory (``$VAR_DIR/run/statistics/``) holding, per
key (model, version, batch size), cumulative int64 counters. The process
adds to its own table as it answers (before the answer leaves, so a read that
begins later sees it); any process sums every table of the machine
(:func:`machine_totals`), so a statistics read includes every inference this
machine answered before the read began, whichever process answered it. A
table is written by its process only; readers copy it (aligned 8-byte
counters: a reader sees each counter whole, old or new).

Tables of processes that ended are added into the machine's ``retired``
table and removed (:func:`retire_dead`, under an exclusive lock that readers
share), so a restart neither loses nor double-counts what an earlier process
answered. Without a directory (tests, the default data plane) the table is
anonymous memory: this process's counts only.

Layout of a table file (little-endian): a 64-byte header (magic, capacity,
used slots, owner pid, owner start time in clock ticks), then ``capacity``
slots of :data:`SLOT` (model name as UTF-8, version, batch size (0: the
version's own counters), :data:`WIDTH` counters).
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
from pathlib import Path

import numpy as np

#: Counters of a version (batch size 0), and of a batch size (success_count:
#: its executions; the compute times). Every success is queued and computed
#: once, so the queue and compute counts are the success count.
FIELDS = (
    "inference_count", "execution_count", "success_count", "success_ns", "fail_count", "fail_ns",
    "queue_ns", "compute_input_ns", "compute_infer_ns", "compute_output_ns", "last_inference_ms",
    "cache_hit_count", "cache_hit_ns", "cache_miss_count", "cache_miss_ns",  # after LAST: older tables hold 0
    "fail_rejected_count", "fail_canceled_count", "fail_backend_count",  # of fail_count, by Triton's reason; 2nd layout
)  # fmt: skip
INDEX = {name: i for i, name in enumerate(FIELDS)}
LAST = INDEX["last_inference_ms"]  # a maximum, not a sum
WIDTH = 24
NAME_BYTES = 256
SLOT = np.dtype([("name", f"S{NAME_BYTES}"), ("version", "<i8"), ("batch", "<i8"), ("c", "<i8", (WIDTH,))])
HEADER = struct.Struct("<8sqqqq")
HEADER_BYTES = 64
MAGIC = b"mhstats2"
#: The first layout (16 counters a slot): tables a previous release left (``retired.stats``) are read in it.
_MAGIC_V1, _SLOT_V1 = b"mhstats1", np.dtype([("name", f"S{NAME_BYTES}"), ("version", "<i8"), ("batch", "<i8"),
                                             ("c", "<i8", (16,))])  # fmt: skip
_COUNTERS_AT = NAME_BYTES + 16  # offset of the counters inside a slot
RETIRED = "retired.stats"
_LOCK = ".lock"

Key = tuple[str, int, int]  # (model, version, batch size; 0 for the version's own counters)


def _start_ticks(pid: int) -> int:
    """When process ``pid`` started (clock ticks since boot), 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return int(stat.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return 0


class CounterTable:
    """One process's cumulative counters (see module doc). Not thread-safe:
    the recorder calls it under its lock."""

    def __init__(self, path: Path | None = None, capacity: int = 1024, owner: tuple[int, int] | None = None):
        """A new table at ``path`` (None: anonymous memory) for ``owner``
        (pid, start ticks; default this process)."""
        self.path = path
        pid = os.getpid() if owner is None else owner[0]
        self._owner = (pid, _start_ticks(pid)) if owner is None else owner
        self._slots: dict[Key, int] = {}
        self._open(capacity)

    def _open(self, capacity: int, copy_from: np.ndarray | None = None) -> None:
        size = HEADER_BYTES + capacity * SLOT.itemsize
        if self.path is None:
            self._map = mmap.mmap(-1, size)
        else:
            temporary = self.path.with_name(self.path.name + ".new")
            with open(temporary, "w+b") as out:
                out.truncate(size)
                self._map = mmap.mmap(out.fileno(), size)
        self.capacity = capacity
        self._slots_view = np.ndarray((capacity,), SLOT, buffer=self._map, offset=HEADER_BYTES)
        self._words = memoryview(self._map).cast("q")
        used = 0 if copy_from is None else len(copy_from)
        if copy_from is not None:
            self._slots_view[:used] = copy_from
        self._write_header(used)
        if self.path is not None:
            os.replace(temporary, self.path)  # readers see the old table or the whole new one

    def _write_header(self, used: int) -> None:
        self._map[: HEADER.size] = HEADER.pack(MAGIC, self.capacity, used, *self._owner)

    @property
    def words(self) -> memoryview:
        """The table as int64 words: a slot's counters begin at :meth:`slot`."""
        return self._words

    def slot(self, key: Key) -> int:
        """The index in :attr:`words` of ``key``'s first counter (a new slot when new)."""
        index = self._slots.get(key)
        if index is None:
            index = self._add_slot(key)
        return (HEADER_BYTES + index * SLOT.itemsize + _COUNTERS_AT) // 8

    def _add_slot(self, key: Key) -> int:
        used = len(self._slots)
        if used == self.capacity:
            self._open(4 * self.capacity, np.array(self._slots_view[:used]))
        self._slots_view[used] = (key[0].encode()[:NAME_BYTES], key[1], key[2], np.zeros(WIDTH, np.int64))
        self._slots[key] = used
        self._write_header(used + 1)  # after the slot's key: a reader never sees a half-written one
        return used

    def add(self, start: int, deltas) -> None:
        """Add ``deltas`` ((field index, value) pairs) at the slot beginning at word ``start``."""
        words = self._words
        for index, value in deltas:
            words[start + index] += value

    def snapshot(self) -> dict[Key, np.ndarray]:
        """A copy of every counter by key."""
        return _totals([read_slots(self._map)])

    def close(self) -> None:
        self._words.release()
        self._map.close()


def read_slots(data) -> np.ndarray:
    """The used slots of a table's bytes (an empty array for anything else;
    a table of the first layout is widened, its further counters 0)."""
    if len(data) < HEADER_BYTES:
        return np.zeros(0, SLOT)
    magic, capacity, used, _, _ = HEADER.unpack_from(data)
    layout = {MAGIC: SLOT, _MAGIC_V1: _SLOT_V1}.get(magic)
    if layout is None or not 0 <= used <= capacity or len(data) < HEADER_BYTES + used * layout.itemsize:
        return np.zeros(0, SLOT)
    slots = np.frombuffer(data, layout, count=used, offset=HEADER_BYTES)
    if layout is SLOT:
        return slots.copy()
    widened = np.zeros(used, SLOT)
    for name in ("name", "version", "batch"):
        widened[name] = slots[name]
    widened["c"][:, : _SLOT_V1["c"].shape[0]] = slots["c"]
    return widened


def _totals(tables: list[np.ndarray]) -> dict[Key, np.ndarray]:
    totals: dict[Key, np.ndarray] = {}
    for slots in tables:
        for slot in slots:
            key = (slot["name"].decode(errors="replace"), int(slot["version"]), int(slot["batch"]))
            counters = slot["c"]
            total = totals.get(key)
            if total is None:
                totals[key] = counters.copy()
            else:
                last = max(total[LAST], counters[LAST])
                total += counters
                total[LAST] = last
    return totals


def machine_totals(directory: Path) -> dict[Key, np.ndarray]:
    """Every table of the machine summed (live processes' and the retired
    one), read under the directory's shared lock."""
    with _locked(directory, fcntl.LOCK_SH):
        tables = []
        for path in directory.glob("*.stats"):
            try:
                tables.append(read_slots(path.read_bytes()))
            except FileNotFoundError:
                continue  # replaced by a larger one meanwhile: its new file is read too
        return _totals(tables)


def retire_dead(directory: Path) -> int:
    """Add the tables of processes that ended into the retired table and
    remove them; returns how many. Safe to call from any process at any time."""
    dead = []
    for path in directory.glob("*.stats"):
        if path.name == RETIRED:
            continue
        try:
            pid, ticks = (int(part) for part in path.stem.split("-"))
        except ValueError:
            continue
        if _start_ticks(pid) != ticks:
            dead.append(path)
    if not dead:
        return 0
    with _locked(directory, fcntl.LOCK_EX):
        retired_path = directory / RETIRED
        tables = [read_slots(retired_path.read_bytes())] if retired_path.exists() else []
        gone = [path for path in dead if path.exists()]
        tables += [read_slots(path.read_bytes()) for path in gone]
        totals = _totals(tables)
        table = CounterTable(retired_path, capacity=max(64, 2 * len(totals)), owner=(0, 0))
        for key, counters in totals.items():
            start = table.slot(key)
            table.add(start, enumerate(counters.tolist()))
        table.close()
        for path in gone:
            path.unlink(missing_ok=True)
    return len(gone)


class _locked:
    """An flock on the directory's lock file for the ``with`` block."""

    def __init__(self, directory: Path, mode: int):
        self.path, self.mode = directory / _LOCK, mode

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, self.mode)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def table_path(directory: Path) -> Path:
    """This process's table file in ``directory``: ``<pid>-<start ticks>.stats``."""
    pid = os.getpid()
    return directory / f"{pid}-{_start_ticks(pid)}.stats"


def machine_id(directory: Path) -> str:
    """The id of the machine whose statistics live in ``directory`` (made once)."""
    path = directory / "machine-id"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        candidate = directory / f"machine-id.{os.getpid()}"
        candidate.write_text(os.urandom(8).hex())
        try:
            os.link(candidate, path)  # the first process to link wins; the others read its id
        except FileExistsError:
            pass
        finally:
            candidate.unlink()
        return path.read_text().strip()
