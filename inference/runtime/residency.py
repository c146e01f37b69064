"""Which model versions stay loaded under a memory budget, and what each costs.

Two questions the model runner asks when a request needs a version that is
not loaded:

1. **What does a version cost?** What it took when it loaded: the growth of
   the process's resident memory (RSS) across the load, measured one load at
   a time (:func:`rss_bytes`). A load can grow RSS by less than it takes
   (the allocator reuses memory freed by an unloaded version), so the charge
   is never below ``size x ratio``, where ``ratio`` is the median of the
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
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Hashable

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """This process's resident set size in bytes (Linux ``/proc/self/statm``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


class Costs:
    """What each version is charged (module doc, question 1)."""

    def __init__(self, cost_factor: float = 2.0):
        self.cost_factor = cost_factor
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
        if size > 0 and grown >= size * instances:  # a credible measurement: the memory is new
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
