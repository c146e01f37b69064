"""Per-minute rollups of shadow traffic, per (minute, model, shadow version),
as the charts' rollups (:mod:`inference.observability.rollups`): each server
process counts in memory, under a lock, what its shadow runs compared and
what it dropped, and hands :meth:`ShadowRollups.pending` to a store (the
database: :mod:`inference.shadow.rollups_db`), which keeps one row per
minute per process, rewritten until the minute closes, so that the rows of
every process add up.

A cell counts shadow requests run (``requests``: compared or failed),
``errors`` (the shadow version refused or failed the copy), ``dropped``
(the per-process shadow queue was full) and ``busy`` (dropped because the
shadow or the live version had requests waiting for its seats), and per
output name an :class:`~inference.shadow.comparison.OutputComparison`.

Minutes are whole minutes since the Unix epoch (UTC).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from inference.shadow.comparison import OutputComparison

Key = tuple[int, str, int]  # (minute, model, shadow version)
#: Why a copy was not run.
DROPPED, BUSY = "dropped", "busy"


@dataclass(slots=True)
class ShadowCell:
    """One (minute, model, shadow version) of one process."""

    requests: int = 0
    errors: int = 0
    dropped: int = 0
    busy: int = 0
    outputs: dict[str, OutputComparison] = field(default_factory=dict)
    changed: bool = True

    def copy(self) -> ShadowCell:
        outputs = {name: counts.copy() for name, counts in self.outputs.items()}
        return ShadowCell(self.requests, self.errors, self.dropped, self.busy, outputs)

    def total(self) -> int:
        """Every copy the cell counts (run, failed or not run), to tell a change."""
        return self.requests + self.dropped + self.busy


class ShadowRollups:
    """This process's open minutes of shadow traffic (thread-safe: the request
    path counts drops, the shadow threads count runs)."""

    def __init__(self):
        self.cells: dict[Key, ShadowCell] = {}
        self._lock = threading.Lock()

    def _cell(self, now_s: float, model: str, version: int) -> ShadowCell:
        key = (int(now_s // 60), model, version)
        cell = self.cells.get(key)
        if cell is None:
            cell = self.cells[key] = ShadowCell()
        cell.changed = True
        return cell

    def compared(self, now_s: float, model: str, version: int, outputs: dict[str, OutputComparison]) -> None:
        """Count one shadow request run at ``now_s`` (seconds since the epoch) and its comparison
        (``outputs``: one request's counts per output name)."""
        with self._lock:
            cell = self._cell(now_s, model, version)
            cell.requests += 1
            for name, counts in outputs.items():
                mine = cell.outputs.get(name)
                if mine is None:
                    cell.outputs[name] = counts
                else:
                    mine.merge(counts)

    def failed(self, now_s: float, model: str, version: int) -> None:
        """Count one shadow request that the shadow version refused or failed."""
        with self._lock:
            cell = self._cell(now_s, model, version)
            cell.requests += 1
            cell.errors += 1

    def skipped(self, now_s: float, model: str, version: int, why: str) -> None:
        """Count one copy not run: ``why`` :data:`DROPPED` (the queue was full) or :data:`BUSY`."""
        with self._lock:
            cell = self._cell(now_s, model, version)
            if why == DROPPED:
                cell.dropped += 1
            else:
                cell.busy += 1

    def pending(self) -> dict[Key, ShadowCell]:
        """Copies of the cells changed since the last :meth:`written`."""
        with self._lock:
            return {key: cell.copy() for key, cell in self.cells.items() if cell.changed}

    def written(self, cells: dict[Key, ShadowCell], now_s: float) -> None:
        """``cells`` (from :meth:`pending`) are stored: unchanged since, they
        need no new write; minutes over two minutes old are closed and dropped."""
        with self._lock:
            for key, copy in cells.items():
                cell = self.cells.get(key)
                if cell is not None and cell.total() == copy.total():
                    cell.changed = False
            oldest = int(now_s // 60) - 2
            for key in [k for k, c in self.cells.items() if k[0] <= oldest and not c.changed]:
                del self.cells[key]
