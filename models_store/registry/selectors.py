"""Reads of the model registry: models, versions, labels, the ensembles'
pins, and what of a model serves. Services write; selectors read.

One lookup per question: :func:`model_get` (a model by name),
:func:`version_get` (a model's version by number), :func:`serving` (which
versions serve and the default one: :func:`inference.serving.state.serving_state`
over :func:`model_record`, the same computation as the serving registry's).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Exists, OuterRef, Prefetch, QuerySet

from inference.ensembles.plan import PLATFORM as ENSEMBLE
from inference.ensembles.plan import plan_of
from inference.ports import ModelRecord, VersionRecord
from inference.serving.state import ServingState, serving_states
from models_store.registry.models import ModelVersion, RegisteredModel, VersionLabel

State = ModelVersion.State


def model_get(name: str) -> RegisteredModel | None:
    """The registered model called ``name``, or None."""
    return RegisteredModel.objects.filter(name=name).first()


def existing_names(names) -> set[str]:
    """Those of ``names`` (model names) that a model in the registry has now."""
    return set(RegisteredModel.objects.filter(name__in=set(names)).values_list("name", flat=True))


def model_teams() -> dict[str, int | None]:
    """Model name -> the id of its team (None: operator-owned), of every model (one query)."""
    return dict(RegisteredModel.objects.values_list("name", "team_id"))


def version_list(model: RegisteredModel) -> QuerySet[ModelVersion]:
    """A model's versions, highest number first."""
    return model.versions.order_by("-number")


def version_get(model: RegisteredModel, number: int) -> ModelVersion | None:
    """The version ``number`` of ``model``, or None."""
    return model.versions.filter(number=number).first()


def version_by_id(version_id: int) -> ModelVersion | None:
    """The version with this row id (its model read with it), or None (deleted)."""
    return ModelVersion.objects.select_related("model").filter(pk=version_id).first()


def version_by_sha256(model: RegisteredModel, sha256: str) -> ModelVersion | None:
    """The version of ``model`` whose artifact has this sha256 (hex), or None."""
    return model.versions.filter(sha256=sha256).first()


def version_by_config(model: RegisteredModel, config_sha256: str) -> ModelVersion | None:
    """The newest ensemble version of ``model`` made from the configuration
    whose canonical JSON has this sha256 (:func:`models_store.intake.ensembles.config_sha256`), or None."""
    return model.versions.filter(properties__config_sha256=config_sha256).order_by("-number").first()


def version_states(model: RegisteredModel) -> dict[int, str]:
    """Version number -> state, of every version of ``model`` (one query)."""
    return dict(model.versions.values_list("number", "state"))


def ready_versions(model: RegisteredModel) -> dict[int, ModelVersion]:
    """The model's READY versions by number (one query)."""
    return {v.number: v for v in model.versions.filter(state=State.READY)}


def validated_versions(model: RegisteredModel) -> QuerySet[ModelVersion]:
    """The versions whose signatures were validated (READY or retired), by number."""
    return model.versions.filter(state__in=(State.READY, State.UNAVAILABLE)).order_by("number")


def artifacts_in_use() -> list[tuple[str, str]]:
    """(artifact, sha256) of every version with a model file (an ensemble has none)."""
    return list(ModelVersion.objects.exclude(artifact="").values_list("artifact", "sha256"))


def artifact_in_use(relpath: str) -> bool:
    """Whether a version's artifact is the one at ``relpath`` (relative to MODEL_STORE_DIR)."""
    return ModelVersion.objects.filter(artifact=relpath).exists()


def registry_snapshot() -> list[RegisteredModel]:
    """Every model with its versions and labels prefetched (three queries), for the serving registry."""
    return list(
        RegisteredModel.objects.select_related("team").prefetch_related("versions", "labels__version").order_by("name")
    )


def _models_with_versions() -> QuerySet[RegisteredModel]:
    versions = ModelVersion.objects.select_related("uploaded_by").order_by("-number")
    labels = VersionLabel.objects.select_related("version").order_by("name")
    return RegisteredModel.objects.select_related("team", "created_by").prefetch_related(
        Prefetch("versions", queryset=versions), Prefetch("labels", queryset=labels)
    )


#: ``order`` values of a model listing -> the ORM ordering (name breaks ties).
MODEL_ORDERINGS = {
    "name": ("name",),
    "-name": ("-name",),
    "team": ("team__name", "name"),
    "-team": ("-team__name", "name"),
    "updated": ("updated_at", "name"),
    "-updated": ("-updated_at", "name"),
}


@dataclass(frozen=True)
class ModelFilter:
    """What a model listing shows: ``name`` a case-insensitive part of the
    model's name, ``team`` a team's name exactly (``"-"``: operator-owned
    models, which have none), ``state`` a version state that at least one of
    the model's versions is in (``READY``, ``FAILED``, ...), ``order`` a key
    of :data:`MODEL_ORDERINGS`. Empty strings filter nothing."""

    name: str = ""
    team: str = ""
    state: str = ""
    order: str = "name"

    @classmethod
    def from_params(cls, params) -> ModelFilter:
        """From query parameters ``name``, ``team``, ``state``, ``order``
        (a QueryDict or dict). Raises ValueError naming an unknown ``order``
        or ``state``."""
        where = cls(
            name=params.get("name", "").strip(),
            team=params.get("team", "").strip(),
            state=params.get("state", "").strip().upper(),
            order=params.get("order", "").strip() or "name",
        )
        if where.order not in MODEL_ORDERINGS:
            raise ValueError(f"unknown order '{where.order}': one of {', '.join(MODEL_ORDERINGS)}")
        if where.state and where.state not in State.values:
            raise ValueError(f"unknown state '{where.state}': one of {', '.join(State.values)}")
        return where


def model_listing(team_ids=None, where: ModelFilter = ModelFilter()) -> QuerySet[RegisteredModel]:
    """The models that ``where`` selects (of the teams ``team_ids`` when given:
    see :func:`models_store.accounts.selectors.visible_team_ids`), each with
    its team, versions (highest first, with uploader) and labels prefetched,
    in ``where.order``: a lazy query, so that a page of it costs three
    queries whatever the registry's size (plus one ``COUNT``)."""
    models = _models_with_versions()
    if team_ids is not None:
        models = models.filter(team_id__in=team_ids)
    if where.name:
        models = models.filter(name__icontains=where.name)
    if where.team == "-":
        models = models.filter(team__isnull=True)
    elif where.team:
        models = models.filter(team__name=where.team)
    if where.state:
        models = models.filter(Exists(ModelVersion.objects.filter(model=OuterRef("pk"), state=where.state)))
    return models.order_by(*MODEL_ORDERINGS[where.order])


def model_detail(name: str) -> RegisteredModel | None:
    """One model prefetched like :func:`model_listing`, or None."""
    return _models_with_versions().filter(name=name).first()


def _ensemble_plans():
    """(ensemble, its version number, plan) of every READY ensemble version
    of a loaded model whose plan reads (one query)."""
    rows = ModelVersion.objects.filter(platform=ENSEMBLE, state=State.READY, model__loaded=True)
    for ensemble, number, properties in rows.values_list("model__name", "number", "properties"):
        plan = plan_of(properties)
        if plan is not None:
            yield ensemble, number, plan


def ensemble_pins(model_name: str | None = None) -> dict[str, set[int]]:
    """Model name -> the version numbers that READY ensemble versions of
    loaded models run (of ``model_name`` only, when given): they serve
    whatever their model's version policy says (:mod:`inference.serving.state`).
    One query."""
    pins: dict[str, set[int]] = {}
    for _ensemble, _number, plan in _ensemble_plans():
        for name, number in plan.pins():
            if model_name is None or name == model_name:
                pins.setdefault(name, set()).add(number)
    return pins


def ensemble_users(model_name: str, numbers=None) -> list[tuple[str, int, int, int]]:
    """The READY ensemble versions of loaded models that run a version of
    ``model_name`` (one of ``numbers``, when given), as (ensemble, its
    version, step number, the pinned version), sorted."""
    users = []
    for ensemble, number, plan in _ensemble_plans():
        for step in plan.steps:
            if step.model == model_name and (numbers is None or step.version in numbers):
                users.append((ensemble, number, step.number, step.version))
    return sorted(users)


def ensemble_composing_models(ensemble: RegisteredModel) -> list[str]:
    """The models that the READY versions of ``ensemble`` run, sorted
    (whether the ensemble is loaded or not)."""
    names = set()
    for properties in ensemble.versions.filter(state=State.READY).values_list("properties", flat=True):
        plan = plan_of(properties)
        if plan is not None:
            names.update(step.model for step in plan.steps)
    return sorted(names)


def label_numbers(model: RegisteredModel) -> dict[str, int]:
    """Version label -> version number (uses prefetched labels when there are)."""
    return {label.name: label.version.number for label in model.labels.all()}


def version_labels(model: RegisteredModel) -> dict[int, list[str]]:
    """A version's row id -> the names of the labels pointing at it, sorted
    (uses prefetched labels when there are)."""
    found: dict[int, list[str]] = {}
    for label in model.labels.all():
        found.setdefault(label.version_id, []).append(label.name)
    return {number: sorted(names) for number, names in found.items()}


def label_versions(model: RegisteredModel) -> dict[str, ModelVersion]:
    """Version label -> the version it points at (one query)."""
    return {label.name: label.version for label in model.labels.select_related("version")}


def optional_inputs(model: RegisteredModel) -> set[str]:
    """The inputs the model's config marks ``optional``."""
    return {t.get("name") for t in (model.config or {}).get("input", []) if t.get("optional")}


def model_record(model: RegisteredModel, pins: dict[str, set[int]] | None = None) -> ModelRecord:
    """A model as the serving side reads it (:class:`inference.ports.ModelRecord`;
    uses prefetched versions and labels when there are). ``pins``:
    :func:`ensemble_pins` of every model (None: read for this model)."""
    config = model.config or {}
    if pins is None:
        pins = ensemble_pins(model.name)
    versions = list(model.versions.all())
    return ModelRecord(
        name=model.name,
        platform=model.platform,
        max_batch_size=model.max_batch_size,
        version_policy=model.version_policy,
        latest_versions=model.latest_versions,
        specific_versions=tuple(model.specific_versions),
        loaded=model.loaded,
        instance_group=tuple(model.instance_group),
        config=model.config,
        dynamic_batching=config.get("dynamic_batching"),
        sequence_batching=config.get("sequence_batching"),
        team=model.team.name if model.team_id else "",
        labels=label_numbers(model),
        traffic=dict(model.traffic or {}),
        payload_log_rate=model.payload_log_rate,
        payload_log_max_bytes=model.payload_log_max_bytes,
        output_labels=dict(model.output_labels or {}),
        pinned=tuple(sorted(pins.get(model.name, ()))),
        shadow_version=next((v.number for v in versions if v.pk == model.shadow_version_id), None),
        shadow_percent=model.shadow_percent,
        versions=tuple(
            VersionRecord(
                number=v.number,
                state=v.state,
                reason=v.reason,
                sha256=v.sha256,
                artifact=v.artifact,
                size=v.size,
                inputs=v.inputs,
                outputs=v.outputs,
                properties=v.properties,
                held=v.held,
            )
            for v in versions
        ),
    )


def serving(model: RegisteredModel, pins: dict[str, set[int]] | None = None) -> ServingState:
    """What of ``model`` serves now: its versions that serve (highest first)
    and its default version, computed as the serving registry computes them
    (:func:`inference.serving.state.serving_states`: version policy, traffic
    split, the versions READY ensembles pin, loaded or unloaded; an
    ensemble's version only while every version it pins serves). ``pins``:
    :func:`ensemble_pins` of every model, for a list (None: read)."""
    if model.platform != ENSEMBLE:
        return serving_states([model_record(model, pins)])[model.name]
    if pins is None:
        pins = ensemble_pins()
    record = model_record(model, pins)
    names = set()
    for version in record.versions:
        plan = plan_of(version.properties)
        if plan is not None:
            names.update(step.model for step in plan.steps)
    steps = [model_record(step, pins) for step in _models_with_versions().filter(name__in=names)]
    return serving_states([record, *steps])[model.name]
