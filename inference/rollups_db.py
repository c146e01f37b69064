"""The database as the store of the charts' per-minute rollups
(:mod:`inference.rollups`): each process writes its own rows (its machine id
and pid), rewriting a minute's row while the minute is open; a read sums the
rows of every process, machine and minute asked for."""

from __future__ import annotations

from django.db import close_old_connections, transaction

from inference.models import MinuteRollupRow
from inference.rollups import Cell, Key

_FIELDS = ("successes", "errors", "inferences", "executions", "queue_ns", "compute_ns")


class DatabaseRollups:
    def write(self, writer: str, cells: dict[Key, Cell]) -> None:
        """One transaction: each cell's row of ``writer`` set to the cell's totals (created when missing)."""
        try:
            with transaction.atomic():
                for (minute, model, version, transport), cell in cells.items():
                    values = {name: getattr(cell, name) for name in _FIELDS}
                    values["queue_histogram"] = cell.queue
                    values["compute_histogram"] = cell.compute
                    values["batch_sizes"] = cell.batches
                    MinuteRollupRow.objects.update_or_create(
                        minute=minute, model_name=model, version=version, transport=transport, writer=writer,
                        defaults=values,
                    )  # fmt: skip
        finally:
            close_old_connections()


def prune(retention_days: float, now_s: float) -> int:
    """Delete the rows of minutes older than ``retention_days``; returns how many."""
    oldest = int((now_s - retention_days * 86400) // 60)
    deleted, _ = MinuteRollupRow.objects.filter(minute__lt=oldest).delete()
    return deleted
