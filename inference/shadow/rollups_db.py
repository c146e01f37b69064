"""The database as the store of shadow traffic's per-minute rollups
(:mod:`inference.shadow.rollups`): each process writes its own rows (its
machine id and pid), rewriting a minute's row while the minute is open;
:func:`read` sums the rows of every process over the minutes asked for.
:func:`prune` (the scheduled upkeep) deletes minutes past the charts' retention."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import close_old_connections, transaction

from inference.models import ShadowRollupRow
from inference.shadow.comparison import OutputComparison
from inference.shadow.rollups import Key, ShadowCell


class DatabaseShadowRollups:
    def write(self, writer: str, cells: dict[Key, ShadowCell]) -> None:
        """One transaction: each cell's row of ``writer`` set to the cell's totals (created when missing)."""
        try:
            with transaction.atomic():
                for (minute, model, version), cell in cells.items():
                    ShadowRollupRow.objects.update_or_create(
                        minute=minute, model_name=model, version=version, writer=writer,
                        defaults={
                            "requests": cell.requests, "errors": cell.errors, "dropped": cell.dropped,
                            "busy": cell.busy,
                            "outputs": {name: counts.as_dict() for name, counts in cell.outputs.items()},
                        },
                    )  # fmt: skip
        finally:
            close_old_connections()


def prune(retention_days: float, now_s: float) -> int:
    """Delete the rows of minutes older than ``retention_days``; returns how many."""
    oldest = int((now_s - retention_days * 86400) // 60)
    deleted, _ = ShadowRollupRow.objects.filter(minute__lt=oldest).delete()
    return deleted


@dataclass
class ShadowTotals:
    """Shadow traffic summed over some minutes: copies run, failed, dropped
    (queue full), busy (not run under load), and per output name its
    :class:`~inference.shadow.comparison.OutputComparison`."""

    requests: int = 0
    errors: int = 0
    dropped: int = 0
    busy: int = 0
    outputs: dict[str, OutputComparison] = field(default_factory=dict)

    def add(self, row: ShadowRollupRow) -> None:
        self.requests += row.requests
        self.errors += row.errors
        self.dropped += row.dropped
        self.busy += row.busy
        for name, data in (row.outputs or {}).items():
            counts = OutputComparison.from_dict(data)
            mine = self.outputs.get(name)
            if mine is None:
                self.outputs[name] = counts
            else:
                mine.merge(counts)


def read(model: str, version: int, first: int, end: int, step: int) -> tuple[ShadowTotals, list[ShadowTotals]]:
    """The shadow traffic of ``model``'s shadow ``version`` over minutes
    [``first``, ``end``): (the totals, one :class:`ShadowTotals` per ``step``
    minutes from ``first``), every process's rows added."""
    count = max(0, (end - first + step - 1) // step)
    steps = [ShadowTotals() for _ in range(count)]
    total = ShadowTotals()
    rows = ShadowRollupRow.objects.filter(model_name=model, version=version, minute__gte=first, minute__lt=end)
    for row in rows:
        steps[(row.minute - first) // step].add(row)
        total.add(row)
    return total, steps


def versions_compared(model: str, first: int) -> list[int]:
    """The shadow versions of ``model`` with rows from minute ``first`` on, highest first."""
    numbers = ShadowRollupRow.objects.filter(model_name=model, minute__gte=first).values_list("version", flat=True)
    return sorted(set(numbers), reverse=True)
