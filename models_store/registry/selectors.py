"""Reads of the model registry: models, versions, labels, the ensembles'
pins, and what of a model serves. Services write; selectors read.

One lookup per question: :func:`model_get` (a model by name),
:func:`version_get` (a model's version by number), :func:`serving` (which
versions serve and the default one: :func:`inference.serving.state.serving_state`
over :func:`model_record`, the same computation as the serving registry's).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from sys import intern

from django.db.models import Exists, OuterRef, Prefetch, Q, QuerySet, TextField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast
from django.db.models.lookups import Exact

from inference.ensembles.plan import PLATFORM as ENSEMBLE
from inference.ensembles.plan import plan_of
from inference.ports import ModelRecord, VersionRecord
from inference.serving.state import ServingState, serving_states
from models_store.registry.models import ModelVersion, RegisteredModel, VersionLabel
from models_store.web.pagination import Key, Keyset

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


_MODEL_COLUMNS = (
    "id", "name", "platform", "max_batch_size", "version_policy", "latest_versions", "loaded", "team__name",
    "payload_log_rate", "payload_log_max_bytes", "shadow_version_id", "shadow_percent",
)  # fmt: skip
_MODEL_JSON = ("specific_versions", "instance_group", "config", "traffic", "output_labels")
_VERSION_COLUMNS = ("model_id", "id", "number", "state", "reason", "sha256", "artifact", "size", "held")
_VERSION_JSON = ("inputs", "outputs", "properties")


def _as_text(*fields: str) -> dict:
    """JSON columns read as their text (parsed once per distinct text by :func:`serving_records`)."""
    return {f"{name}_text": Cast(name, TextField()) for name in fields}


def serving_records(names: Collection[str] | None = None) -> list[ModelRecord]:
    """Every model as the serving registry reads it (:func:`model_record` of
    each, by name), or only those of ``names`` (a name with no model is left
    out), in four queries that build no ORM objects: models, versions,
    labels, the ensembles' pins. A JSON column's text is parsed
    once per distinct text and the result shared by the records that hold
    it (10,000 models with one signature hold one parsed signature): the
    serving side treats records as immutable."""
    parsed: dict[str, object] = {}

    def load(text):
        if text is None:
            return None
        value = parsed.get(text)
        if value is None:
            value = parsed[text] = json.loads(text)
        return value

    versions: dict[int, list] = {}
    version_numbers: dict[int, int] = {}  # a version's row id -> its number
    owners: dict[int, int] = {}  # a version's row id -> its model's
    rows = ModelVersion.objects.order_by("model_id", "-number").annotate(**_as_text(*_VERSION_JSON))
    label_rows = VersionLabel.objects.order_by("model_id", "name")
    models = RegisteredModel.objects.order_by("name").annotate(**_as_text(*_MODEL_JSON))
    if names is not None:
        names = list(names)
        rows = rows.filter(model__name__in=names)
        label_rows = label_rows.filter(model__name__in=names)
        models = models.filter(name__in=names)
    for row in rows.values_list(*_VERSION_COLUMNS, *(f"{n}_text" for n in _VERSION_JSON)).iterator(2000):
        model_id, pk, number, state, reason, sha256, artifact, size, held, inputs, outputs, properties = row
        version_numbers[pk], owners[pk] = number, model_id
        versions.setdefault(model_id, []).append(
            VersionRecord(number, intern(state), intern(reason) if len(reason) < 64 else reason, sha256, artifact,
                          size, load(inputs), load(outputs), load(properties), held)
        )  # fmt: skip
    labels: dict[int, dict[str, int]] = {}
    for model_id, name, version_id in label_rows.values_list("model_id", "name", "version_id"):
        labels.setdefault(model_id, {})[name] = version_numbers[version_id]
    pins = ensemble_pins()
    records = []
    for row in models.values_list(*_MODEL_COLUMNS, *(f"{n}_text" for n in _MODEL_JSON)).iterator(2000):
        (pk, name, platform, max_batch_size, policy, latest, loaded, team, log_rate, log_bytes, shadow_id,
         shadow_percent, specific, groups, config, traffic, output_labels) = row  # fmt: skip
        config = load(config) or {}
        records.append(
            ModelRecord(
                name=name,
                platform=intern(platform),
                max_batch_size=max_batch_size,
                version_policy=intern(policy),
                latest_versions=latest,
                specific_versions=tuple(load(specific) or ()),
                loaded=loaded,
                instance_group=tuple(load(groups) or ()),
                config=config,
                dynamic_batching=config.get("dynamic_batching"),
                sequence_batching=config.get("sequence_batching"),
                team=intern(team or ""),
                labels=labels.get(pk, {}),
                traffic=load(traffic) or {},
                payload_log_rate=log_rate,
                payload_log_max_bytes=log_bytes,
                output_labels=load(output_labels) or {},
                pinned=tuple(sorted(pins.get(name, ()))),
                shadow_version=version_numbers[shadow_id] if owners.get(shadow_id) == pk else None,
                shadow_percent=shadow_percent,
                versions=tuple(versions.get(pk, ())),
            )
        )
    return records


def _models_listed() -> QuerySet[RegisteredModel]:
    """Models as lists show them: their team, their versions (highest first;
    without signatures, validation logs or uploaders) and labels prefetched."""
    versions = ModelVersion.objects.defer("inputs", "outputs", "log", "source").order_by("-number")
    labels = (
        VersionLabel.objects.select_related("version")
        .only("model", "name", "version", "version__number")
        .order_by("name")
    )
    return RegisteredModel.objects.select_related("team").prefetch_related(
        Prefetch("versions", queryset=versions), Prefetch("labels", queryset=labels)
    )


def _models_with_versions() -> QuerySet[RegisteredModel]:
    versions = ModelVersion.objects.select_related("uploaded_by").order_by("-number")
    labels = VersionLabel.objects.select_related("version").order_by("name")
    return RegisteredModel.objects.select_related("team", "created_by").prefetch_related(
        Prefetch("versions", queryset=versions), Prefetch("labels", queryset=labels)
    )


#: ``order`` values of a model listing -> its keyset order (the name breaks ties; models without a team
#: sort first by team, last by -team, on every database): ``after=<model name>`` pages it.
MODEL_ORDERINGS = {
    "name": Keyset((Key("name"),), "name"),
    "-name": Keyset((Key("name", descending=True),), "name"),
    "team": Keyset((Key("team__name", nullable=True), Key("name")), "name"),
    "-team": Keyset((Key("team__name", descending=True, nullable=True), Key("name")), "name"),
    "updated": Keyset((Key("updated_at"), Key("name")), "name"),
    "-updated": Keyset((Key("updated_at", descending=True), Key("name")), "name"),
}


@dataclass(frozen=True)
class ModelFilter:
    """What a model listing shows: ``name`` a case-insensitive part of the
    model's name, ``team`` a team's name exactly (``"-"``: operator-owned
    models, which have none), ``state`` a version state that at least one of
    the model's versions is in (``READY``, ``FAILED``, ...), ``order`` a key
    of :data:`MODEL_ORDERINGS`; ``q`` a case-insensitive part of the name,
    the description or a version's description; ``tags`` each ``key`` (the
    model or one of its versions has the tag) or ``key=value`` (with that
    value exactly), all of them. Empty strings filter nothing."""

    name: str = ""
    team: str = ""
    state: str = ""
    order: str = "name"
    q: str = ""
    tags: tuple[str, ...] = ()

    @classmethod
    def from_params(cls, params) -> ModelFilter:
        """From query parameters ``name``, ``team``, ``state``, ``order``,
        ``q`` and ``tag`` (repeatable; a QueryDict or dict). Raises ValueError
        naming an unknown ``order`` or ``state``."""
        tags = params.getlist("tag") if hasattr(params, "getlist") else [params.get("tag", "")]
        where = cls(
            name=params.get("name", "").strip(),
            team=params.get("team", "").strip(),
            state=params.get("state", "").strip().upper(),
            order=params.get("order", "").strip() or "name",
            q=params.get("q", "").replace("\x00", "").strip(),  # NUL: no text holds it (PostgreSQL refuses it)
            tags=tuple(t.replace("\x00", "").strip() for t in tags if t.replace("\x00", "").strip()),
        )
        if where.order not in MODEL_ORDERINGS:
            raise ValueError(f"unknown order '{where.order}': one of {', '.join(MODEL_ORDERINGS)}")
        if where.state and where.state not in State.values:
            raise ValueError(f"unknown state '{where.state}': one of {', '.join(State.values)}")
        return where


def model_listing(
    team_ids=None, where: ModelFilter = ModelFilter(), prefetched: bool = True
) -> QuerySet[RegisteredModel]:
    """The models that ``where`` selects (of the teams ``team_ids`` when given:
    see :func:`models_store.accounts.selectors.visible_team_ids`), each with
    its team, versions (highest first; what lists show of them: no
    signatures, validation logs or uploaders) and labels prefetched, in
    ``where.order``: a lazy query, so that a page of it costs three queries
    whatever the registry's size (plus one ``COUNT``). ``prefetched`` false:
    the models and their teams only (the management API's list reads the
    rest of a page itself: :mod:`models_store.registry.listing`)."""
    models = _models_listed() if prefetched else RegisteredModel.objects.select_related("team")
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
    if where.q:
        described = ModelVersion.objects.filter(model=OuterRef("pk"), description__icontains=where.q)
        models = models.filter(Q(name__icontains=where.q) | Q(description__icontains=where.q) | Exists(described))
    for tag in where.tags:
        tagged_version = ModelVersion.objects.filter(_tagged(tag), model=OuterRef("pk"))
        models = models.filter(_tagged(tag) | Exists(tagged_version))
    return models.order_by(*MODEL_ORDERINGS[where.order].ordering())


def _tagged(tag: str) -> Q:
    """``key`` (has the tag) or ``key=value`` (that value exactly) on a row's ``tags``."""
    key, sep, value = tag.partition("=")
    key = key.strip()
    if not sep:
        return Q(tags__has_key=key)
    return Q(tags__has_key=key) & Q(Exact(KeyTextTransform(key, "tags"), value.strip()))


def model_detail(name: str) -> RegisteredModel | None:
    """One model with its versions in full (with uploader) and labels prefetched, or None."""
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


def model_record(
    model: RegisteredModel, pins: dict[str, set[int]] | None = None, signatures: bool = True
) -> ModelRecord:
    """A model as the serving side reads it (:class:`inference.ports.ModelRecord`;
    uses prefetched versions and labels when there are). ``pins``:
    :func:`ensemble_pins` of every model (None: read for this model);
    ``signatures``: false leaves the versions' inputs and outputs empty
    (what serves does not depend on them; lists do not read them)."""
    versions = list(model.versions.all())
    records = tuple(
        VersionRecord(
            number=v.number,
            state=v.state,
            reason=v.reason,
            sha256=v.sha256,
            artifact=v.artifact,
            size=v.size,
            inputs=v.inputs if signatures else [],
            outputs=v.outputs if signatures else [],
            properties=v.properties,
            held=v.held,
        )
        for v in versions
    )
    shadow = next((v.number for v in versions if v.pk == model.shadow_version_id), None)
    return record_of(model, records, label_numbers(model), shadow, pins)


def record_of(
    model: RegisteredModel, versions: tuple[VersionRecord, ...], labels: dict[str, int], shadow: int | None,
    pins: dict[str, set[int]] | None = None,
) -> ModelRecord:  # fmt: skip
    """The :class:`inference.ports.ModelRecord` of ``model`` with these
    versions (highest first), labels (label -> version number) and shadow
    version number; ``pins`` as :func:`model_record`'s."""
    config = model.config or {}
    if pins is None:
        pins = ensemble_pins(model.name)
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
        labels=labels,
        traffic=dict(model.traffic or {}),
        payload_log_rate=model.payload_log_rate,
        payload_log_max_bytes=model.payload_log_max_bytes,
        output_labels=dict(model.output_labels or {}),
        pinned=tuple(sorted(pins.get(model.name, ()))),
        shadow_version=shadow,
        shadow_percent=model.shadow_percent,
        versions=versions,
    )


def serving(model: RegisteredModel, pins: dict[str, set[int]] | None = None) -> ServingState:
    """What of ``model`` serves now: its versions that serve (highest first)
    and its default version, computed as the serving registry computes them
    (:func:`inference.serving.state.serving_states`: version policy, traffic
    split, the versions READY ensembles pin, loaded or unloaded; an
    ensemble's version only while every version it pins serves). ``pins``:
    :func:`ensemble_pins` of every model, for a list (None: read)."""
    if model.platform != ENSEMBLE:
        return serving_states([model_record(model, pins, signatures=False)])[model.name]
    if pins is None:
        pins = ensemble_pins()
    record = model_record(model, pins, signatures=False)
    names = set()
    for version in record.versions:
        plan = plan_of(version.properties)
        if plan is not None:
            names.update(step.model for step in plan.steps)
    steps = [model_record(step, pins, signatures=False) for step in _models_listed().filter(name__in=names)]
    return serving_states([record, *steps])[model.name]


def model_load_states() -> dict[str, tuple[bool, bool]]:
    """Model name -> (loaded, is an ensemble), of every model (one query)."""
    rows = RegisteredModel.objects.values_list("name", "loaded", "platform")
    return {name: (loaded, platform == ENSEMBLE) for name, loaded, platform in rows}


def models_sourced_with(prefix: str) -> set[str]:
    """The names of the models with a version whose ``source`` starts with
    ``prefix`` (e.g. ``import: ``, a repository import's), of any state."""
    rows = ModelVersion.objects.filter(source__startswith=prefix).values_list("model__name", flat=True)
    return set(rows.distinct())


def versions_sourced_with(model: RegisteredModel, prefix: str) -> QuerySet[ModelVersion]:
    """The versions of ``model`` whose ``source`` starts with ``prefix``, by number."""
    return model.versions.filter(source__startswith=prefix).order_by("number")
