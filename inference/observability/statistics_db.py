"""The database as the statistics store (:class:`inference.ports.StatisticsStore`):
every process adds its deltas to its machine's rows with ``F()`` increments;
a read sums the rows of every machine but the reader's own (which it counts
exactly from its processes' tables, :mod:`inference.observability.statistics_local`).

The processes of a machine update the same rows: each transaction updates
them in one order (sorted by key, the version rows before the batch rows),
so that two of them never wait for each other's rows (PostgreSQL's
"deadlock detected")."""

from __future__ import annotations

from django.db import IntegrityError, close_old_connections, transaction
from django.db.models import F
from django.db.models.functions import Greatest

from inference.models import BatchStatisticsRow, ModelStatisticsRow
from inference.observability.statistics import BatchCounters, VersionCounters


class DatabaseStatistics:
    def add(self, machine: str, versions: dict, batches: dict, last: dict) -> None:
        """One transaction: UPDATE ... SET x = x + delta per row of ``machine``
        (created when missing), in the rows' sorted order (see the module doc)."""
        try:
            with transaction.atomic():
                for (model, version), counters in sorted(versions.items(), key=_key):
                    changes = {name: F(name) + value for name, value in counters.as_dict().items() if value}
                    changes["last_inference_ms"] = Greatest(F("last_inference_ms"), last.get((model, version), 0))
                    key = {"machine": machine, "model_name": model, "version": version}
                    _add(ModelStatisticsRow, key, changes)
                for (model, version, size), counters in sorted(batches.items(), key=_key):
                    changes = {name: F(name) + value for name, value in counters.as_dict().items()}
                    key = {"machine": machine, "model_name": model, "version": version, "batch_size": size}
                    _add(BatchStatisticsRow, key, changes)
        finally:
            close_old_connections()

    def read(self, keys: list[tuple[str, int]], exclude_machine: str = "") -> tuple[dict, dict, dict]:
        """Totals over every machine but ``exclude_machine``: (versions, batches, last)."""
        names = {m for m, _ in keys}
        versions, batches, last = {}, {}, {}
        for row in ModelStatisticsRow.objects.filter(model_name__in=names).exclude(machine=exclude_machine):
            key = (row.model_name, row.version)
            versions.setdefault(key, VersionCounters()).add(VersionCounters(**{f: getattr(row, f) for f in _VERSION}))
            last[key] = max(last.get(key, 0), row.last_inference_ms)
        for row in BatchStatisticsRow.objects.filter(model_name__in=names).exclude(machine=exclude_machine):
            key = (row.model_name, row.version, row.batch_size)
            batches.setdefault(key, BatchCounters()).add(BatchCounters(**{f: getattr(row, f) for f in _BATCH}))
        return versions, batches, last


def _key(item: tuple) -> tuple:
    return item[0]


_VERSION = list(VersionCounters().as_dict())
_BATCH = list(BatchCounters().as_dict())


def _add(model_class, key: dict, changes: dict) -> None:
    if model_class.objects.filter(**key).update(**changes):
        return
    try:
        with transaction.atomic():
            model_class.objects.create(**key)
    except IntegrityError:
        pass  # another process created it meanwhile
    model_class.objects.filter(**key).update(**changes)
