"""What the management API's model list shows of a page of models beyond
their own rows: each model's versions (a summary), labels and what serves,
read for the whole page in three queries that build no ORM objects (Django's
prefetching cost about 0.35 ms a model; a page holds up to ``MAX_LIMIT``)."""

from __future__ import annotations

from dataclasses import dataclass

from inference.ensembles.plan import PLATFORM as ENSEMBLE
from inference.ports import VersionRecord
from inference.serving.state import ServingState, serving_states
from models_store.registry import selectors
from models_store.registry.models import ModelVersion, RegisteredModel, VersionLabel


@dataclass(frozen=True)
class Listed:
    """A listed model's versions (``(number, state, size, sha256,
    created_at)``, highest first), labels (label -> version number) and
    serving state."""

    versions: list[tuple]
    labels: dict[str, int]
    state: ServingState


def page_details(models: list[RegisteredModel]) -> dict[int, Listed]:
    """Model row id -> :class:`Listed`, for ``models`` (a page). An
    ensemble's serving state is read as :func:`selectors.serving` reads it
    (its steps' models too); every other model's from the rows read here."""
    ids = [model.pk for model in models]
    rows: dict[int, list] = {pk: [] for pk in ids}
    numbers: dict[int, int] = {}  # version row id -> number
    columns = ("model_id", "id", "number", "state", "reason", "sha256", "artifact", "size", "held", "created_at")
    for model_id, pk, number, state, reason, sha256, artifact, size, held, created in (
        ModelVersion.objects.filter(model_id__in=ids).order_by("model_id", "-number").values_list(*columns)
    ):
        numbers[pk] = number
        rows[model_id].append((VersionRecord(number, state, reason, sha256, artifact, size, held=held), created))
    labels: dict[int, dict[str, int]] = {pk: {} for pk in ids}
    for model_id, name, number in (
        VersionLabel.objects.filter(model_id__in=ids)
        .order_by("name")
        .values_list("model_id", "name", "version__number")
    ):
        labels[model_id][name] = number
    pins = selectors.ensemble_pins()
    records = {
        model.pk: selectors.record_of(
            model, tuple(r for r, _ in rows[model.pk]), labels[model.pk], numbers.get(model.shadow_version_id), pins
        )
        for model in models
        if model.platform != ENSEMBLE
    }
    states = serving_states(records.values())
    details = {}
    for model in models:
        record = records.get(model.pk)
        state = states[record.name] if record is not None else selectors.serving(model, pins)
        summary = [(r.number, r.state, r.size, r.sha256, created) for r, created in rows[model.pk]]
        details[model.pk] = Listed(summary, labels[model.pk], state)
    return details
