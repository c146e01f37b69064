"""The database as the store of the charts' per-minute rollups
(:mod:`inference.observability.rollups`): each process writes its own rows (its machine id
and pid), rewriting a minute's row while the minute is open; a read sums the
rows of every process, machine and minute asked for. Minutes older than
:data:`COMPACT_AFTER_HOURS` (only the week's range, in 1-hour steps, still
reads them) are folded into one row per hour, model, version and transport
(:func:`compact`, by the scheduled upkeep), so that a week is 168 rows per
series rather than 10,080 per series and process."""

from __future__ import annotations

from django.db import close_old_connections, transaction

from inference.models import MinuteRollupRow
from inference.observability.rollups import Cell, Key, add_histograms

_FIELDS = ("successes", "errors", "inferences", "executions", "queue_ns", "compute_ns")
#: The writer of the hour rows :func:`compact` makes (their ``minute``: the hour's first).
HOURLY = "hourly"
#: Minutes older than this are folded into hours (the day's range, 5-minute steps, reads the last 24 hours).
COMPACT_AFTER_HOURS = 26


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


class _Raced(Exception):
    """Another process folded the same hour meanwhile."""


def compact(now_s: float, max_hours: int = 48) -> int:
    """Fold the minute rows of whole hours older than :data:`COMPACT_AFTER_HOURS`
    into hour rows (at most ``max_hours`` hours, oldest first, one transaction
    each); returns the hours folded. Safe in several processes at once: an
    hour whose minute rows another process deleted meanwhile is left to it."""
    cutoff = (int(now_s) // 3600 - COMPACT_AFTER_HOURS) * 60  # first minute of the first hour kept
    folded = 0
    while folded < max_hours:
        first = (
            MinuteRollupRow.objects.filter(minute__lt=cutoff).exclude(writer=HOURLY).order_by("minute")
            .values_list("minute", flat=True).first()
        )  # fmt: skip
        if first is None:
            break
        try:
            _fold_hour(first // 60 * 60)
        except _Raced:
            pass
        folded += 1
    return folded


def _fold_hour(start: int) -> None:
    minutes = MinuteRollupRow.objects.filter(minute__gte=start, minute__lt=start + 60).exclude(writer=HOURLY)
    with transaction.atomic():
        rows = list(minutes.order_by("pk").select_for_update())  # locked in one order: processes queue, never cross
        if minutes.delete()[0] != len(rows):
            raise _Raced
        hours: dict[tuple, MinuteRollupRow] = {}
        for row in rows:
            key = (row.model_name, row.version, row.transport)
            hour = hours.get(key)
            if hour is None:
                hour = hours[key] = MinuteRollupRow.objects.filter(
                    minute=start, model_name=row.model_name, version=row.version, transport=row.transport,
                    writer=HOURLY,
                ).first() or MinuteRollupRow(
                    minute=start, model_name=row.model_name, version=row.version, transport=row.transport,
                    writer=HOURLY, queue_histogram={}, compute_histogram={}, batch_sizes={},
                )  # fmt: skip
            for name in _FIELDS:
                setattr(hour, name, getattr(hour, name) + getattr(row, name))
            for name in ("queue_histogram", "compute_histogram", "batch_sizes"):
                merged = add_histograms({}, getattr(hour, name))  # int keys (the database gives strings)
                setattr(hour, name, add_histograms(merged, getattr(row, name)))
        for _key, hour in sorted(hours.items()):
            hour.save()
