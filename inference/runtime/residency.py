"""Which model versions stay loaded under a memory budget, and what each costs.

Two questions the model runner asks when a request needs a version that is
not loaded:

1. **What does a version cost?** What it took when it loaded: the growth of
   the process's resident memory (RSS) across the load, measured one load at
   a time (:func:`rss_bytes`), after the freed memory went back to the
   system (below). A load can grow RSS by less than it takes (the allocator
   reuses memory freed by an unloaded version), so a growth below
   ``credible x size`` is not taken as a measurement and the charge is never
   below ``size x ratio``, where ``ratio`` is the median of the
   RSS-to-file-size ratios of the loads measured so far in this process
   (starting at ``cost_factor``); and a version once measured keeps its
   largest measurement.
2. **Does it stay?** Eviction is least-recently-used, but a version is
   *admitted* (kept, evicting others) only when it has been asked for more
   often, recently, than each version it would evict (TinyLFU's admission:
   Einziger, Friedman and Manes, "TinyLFU: A Highly Efficient Cache Admission
   Policy", ACM TOS 2017). Otherwise it runs *transiently*: loaded for the
   requests at hand and unloaded when they are done, outside the budget. So
   a working set larger than the budget keeps a stable resident part that
   finds its sessions loaded, instead of every request evicting the version
   the next one needs (plain LRU under cyclic access: 0 hits). Frequencies
   are halved every ``10 x`` (distinct versions seen) requests, so that the
   resident set follows a change of traffic.

The budget holds for admitted versions; at most one transient version per
runner is loaded at a time on top of it (the stated fixed overhead: the
largest version's cost).

**Memory an unloaded version held goes back to the system.** glibc's
``malloc`` keeps freed memory in its heaps, and it raises its mmap threshold
(up to 32 MiB) each time a large mapped block is freed, so that the weights
of the next version land in a heap, where they stay after it is unloaded:
RSS grew by 2-4x the budget under cyclic access while the charges held it
(issue 39). :func:`bound_heaps` fixes the threshold at
:data:`MMAP_THRESHOLD` (blocks at least that large are mapped, and unmapped
when freed) and :func:`release_freed_memory` (``malloc_trim(0)``) hands the
free pages of every heap back; the runner calls it before and after each
load, so that a load's RSS growth is what the version holds, not the
parser's garbage. Both do nothing on a C library other than glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import statistics
from collections.abc import Hashable

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
#: Blocks at least this large are memory-mapped by glibc's malloc (:func:`bound_heaps`), bytes: the weights
#: of a model and ONNX Runtime's arena chunks, whose pages then go back to the system when they are freed.
MMAP_THRESHOLD = 4 * 1024 * 1024
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (glibc's malloc.h)


def _glibc():
    """glibc's ``libc`` (ctypes), or None on another C library."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018 (glibc only)
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _glibc()


def bound_heaps(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes for this process
    (``mallopt(M_MMAP_THRESHOLD)``, which also stops its dynamic growth):
    blocks that large are mapped, and unmapped when freed. The trim threshold
    is fixed at twice that, as glibc's dynamic rule would set it: a heap's
    free top is given back only past it, so that the buffers a request frees
    are not handed back and faulted in again by the next one (CNN: 1.45x the
    run time with glibc's 128 KiB, once, on a busy machine). An operator's own ``MALLOC_MMAP_THRESHOLD_``
    (glibc's environment variable) is left alone. True when set (False on
    another C library, or with that variable)."""
    if _LIBC is None or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    return bool(_LIBC.mallopt(_M_MMAP_THRESHOLD, threshold) and _LIBC.mallopt(_M_TRIM_THRESHOLD, 2 * threshold))


#: glibc's tunable (2.35 and later; older ones ignore it) that asks for transparent huge pages on the blocks
#: malloc maps: a load under bounded heaps maps its buffers afresh, and faulting them in 4 KiB pages made it
#: 2.3x slower on a busy machine (bench/budget.py --latency); with 2 MiB pages it costs about what glibc's
#: defaults do. Set by ``serve`` for its processes (:func:`allocator_environment`).
HUGE_PAGES_TUNABLE = "glibc.malloc.hugetlb=1"


def allocator_environment(environ: dict) -> dict:
    """The environment variables a serving process started with ``environ``
    should get for its heaps under a budget in RSS: ``GLIBC_TUNABLES`` with
    :data:`HUGE_PAGES_TUNABLE`, unless the operator set ``GLIBC_TUNABLES``
    (left alone) or the C library is not glibc."""
    if _LIBC is None or "GLIBC_TUNABLES" in environ:
        return {}
    return {"GLIBC_TUNABLES": HUGE_PAGES_TUNABLE}


def release_freed_memory() -> bool:
    """Return the free pages of every malloc heap of this process to the
    system (glibc's ``malloc_trim(0)``; about a millisecond per hundred MiB
    of heap). True when some memory was released."""
    return bool(_LIBC is not None and _LIBC.malloc_trim(0))


def rss_bytes() -> int:
    """This process's resident set size in bytes (Linux ``/proc/self/statm``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


class Costs:
    """What each version is charged (module doc, question 1)."""

    def __init__(self, cost_factor: float = 2.0, credible: float = 1.0):
        """``cost_factor``: the ratio assumed before any load was measured;
        ``credible``: the smallest growth-to-size ratio taken as a measurement
        (below it the allocator is assumed to have reused freed memory)."""
        self.cost_factor = cost_factor
        self.credible = credible
        self._ratios: list[float] = []
        self._measured: dict[Hashable, int] = {}

    def ratio(self) -> float:
        """The RSS-to-file-size ratio used for a load that measured less."""
        return statistics.median(self._ratios) if self._ratios else self.cost_factor

    def estimate(self, key: Hashable, size: int, instances: int) -> int:
        """What a version is expected to take before it loads: its largest
        measurement, else ``size x instances x`` :meth:`ratio`."""
        return self._measured.get(key) or int(size * instances * self.ratio())

    def charge(self, key: Hashable, size: int, instances: int, grown: int) -> int:
        """The bytes charged for ``instances`` sessions of a ``size``-byte
        artifact whose load grew RSS by ``grown`` bytes."""
        if size > 0 and grown >= size * instances * self.credible:  # a credible measurement: the memory is new
            self._ratios.append(grown / (size * instances))
            del self._ratios[:-64]
            cost = grown
        else:  # the allocator reused freed memory (or nothing was measured)
            cost = max(grown, int(size * instances * self.ratio()))
        cost = max(cost, self._measured.get(key, 0))
        self._measured[key] = cost
        return cost


class Admission:
    """Recent request counts per version and the admission rule (module doc, question 2)."""

    def __init__(self, halve_every: int = 10, minimum_window: int = 64):
        self._counts: dict[Hashable, int] = {}
        self._touches = 0
        self._halve_every = halve_every
        self._minimum_window = minimum_window

    def touch(self, key: Hashable) -> None:
        """Count one request for ``key``."""
        self._counts[key] = self._counts.get(key, 0) + 1
        self._touches += 1
        if self._touches >= max(self._minimum_window, self._halve_every * len(self._counts)):
            self._touches = 0
            self._counts = {k: c // 2 for k, c in self._counts.items() if c > 1}

    def frequency(self, key: Hashable) -> int:
        return self._counts.get(key, 0)

    def admits(self, key: Hashable, victims: list[Hashable]) -> bool:
        """Whether ``key`` should replace ``victims`` (ties keep the residents)."""
        mine = self.frequency(key)
        return all(mine > self.frequency(victim) for victim in victims)

    def forget(self, key: Hashable) -> None:
        self._counts.pop(key, None)
