"""The database as the statistics store (:class:`inference.ports.StatisticsStore`):
every process adds its deltas to the same rows with ``F()`` increments."""

from __future__ import annotations

from django.db import IntegrityError, close_old_connections, transaction
from django.db.models import F
from django.db.models.functions import Greatest

from inference.models import BatchStatisticsRow, ModelStatisticsRow
from inference.statistics import BatchCounters, VersionCounters


class DatabaseStatistics:
    def add(self, versions: dict, batches: dict, last: dict) -> None:
        """One transaction: UPDATE ... SET x = x + delta per row (created when missing)."""
        try:
            with transaction.atomic():
                for (model, version), counters in versions.items():
                    changes = {name: F(name) + value for name, value in counters.as_dict().items() if value}
                    changes["last_inference_ms"] = Greatest(F("last_inference_ms"), last.get((model, version), 0))
                    _add(ModelStatisticsRow, {"model_name": model, "version": version}, changes)
                for (model, version, size), counters in batches.items():
                    changes = {name: F(name) + value for name, value in counters.as_dict().items()}
                    _add(BatchStatisticsRow, {"model_name": model, "version": version, "batch_size": size}, changes)
        finally:
            close_old_connections()

    def read(self, keys: list[tuple[str, int]]) -> tuple[dict, dict, dict]:
        names = {m for m, _ in keys}
        versions, batches, last = {}, {}, {}
        version_fields = list(VersionCounters().as_dict())
        batch_fields = list(BatchCounters().as_dict())
        for row in ModelStatisticsRow.objects.filter(model_name__in=names):
            key = (row.model_name, row.version)
            versions[key] = VersionCounters(**{f: getattr(row, f) for f in version_fields})
            last[key] = row.last_inference_ms
        for row in BatchStatisticsRow.objects.filter(model_name__in=names):
            batches[(row.model_name, row.version, row.batch_size)] = BatchCounters(
                **{f: getattr(row, f) for f in batch_fields}
            )
        return versions, batches, last


def _add(model_class, key: dict, changes: dict) -> None:
    if model_class.objects.filter(**key).update(**changes):
        return
    try:
        with transaction.atomic():
            model_class.objects.create(**key)
    except IntegrityError:
        pass  # another process created it meanwhile
    model_class.objects.filter(**key).update(**changes)
