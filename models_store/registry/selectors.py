"""Reads of the model registry. Services write; selectors read."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Exists, OuterRef, Prefetch, QuerySet

from inference.ensembles import PLATFORM as ENSEMBLE
from inference.ensembles import plan_of
from inference.ports import ModelRecord, VersionRecord
from inference.serving_state import ServingState, serving_state
from models_store.models import (
    ApiToken,
    AuditEvent,
    ModelVersion,
    RegisteredModel,
    RegistryStamp,
    Team,
    TeamMembership,
    VersionLabel,
)


def model_get(name: str) -> RegisteredModel | None:
    """The registered model called ``name``, or None."""
    return RegisteredModel.objects.filter(name=name).first()


def model_list() -> QuerySet[RegisteredModel]:
    return RegisteredModel.objects.order_by("name")


def version_list(model: RegisteredModel) -> QuerySet[ModelVersion]:
    """A model's versions, highest number first."""
    return model.versions.order_by("-number")


def version_get(model: RegisteredModel, number: int) -> ModelVersion | None:
    return model.versions.filter(number=number).first()


def version_by_sha256(model: RegisteredModel, sha256: str) -> ModelVersion | None:
    return model.versions.filter(sha256=sha256).first()


def registry_snapshot() -> list[RegisteredModel]:
    """Every model with its versions and labels prefetched (three queries), for the serving registry."""
    return list(
        RegisteredModel.objects.select_related("team").prefetch_related("versions", "labels__version").order_by("name")
    )


_STAMP_SQL = f"SELECT counter FROM {RegistryStamp._meta.db_table} WHERE id = 1"  # a constant: no input


def stamp_get() -> int:
    """The registry's change counter (0 before the first write).

    Plain SQL on purpose: every registry miss on the request path reads it,
    and the ORM's query building costs ~15x the query (SQLite: 236 vs 15 us).
    """
    with connection.cursor() as cursor:
        cursor.execute(_STAMP_SQL)
        row = cursor.fetchone()
    return row[0] if row else 0


def _models_with_versions() -> QuerySet[RegisteredModel]:
    versions = ModelVersion.objects.select_related("uploaded_by").order_by("-number")
    labels = VersionLabel.objects.select_related("version").order_by("name")
    return RegisteredModel.objects.select_related("team", "created_by").prefetch_related(
        Prefetch("versions", queryset=versions), Prefetch("labels", queryset=labels)
    )


def model_overview(team_ids=None) -> list[RegisteredModel]:
    """Every model (of the teams ``team_ids`` when given: see
    :func:`models_store.permissions.visible_team_ids`) with its team,
    versions (highest first, with uploader) and labels prefetched, for the
    model list (three queries)."""
    models = _models_with_versions()
    if team_ids is not None:
        models = models.filter(team_id__in=team_ids)
    return list(models.order_by("name"))


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
        if where.state and where.state not in ModelVersion.State.values:
            raise ValueError(f"unknown state '{where.state}': one of {', '.join(ModelVersion.State.values)}")
        return where


def model_listing(team_ids=None, where: ModelFilter = ModelFilter()) -> QuerySet[RegisteredModel]:
    """The models that ``where`` selects (of the teams ``team_ids`` when given),
    prefetched like :func:`model_overview`, in ``where.order``: a lazy query,
    so that a page of it costs three queries whatever the registry's size
    (plus one ``COUNT``)."""
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


def team_names(team_ids=None) -> list[str]:
    """The names of the teams ``team_ids`` (every team when None), sorted."""
    teams = Team.objects.all() if team_ids is None else Team.objects.filter(pk__in=team_ids)
    return list(teams.order_by("name").values_list("name", flat=True))


def model_detail(name: str) -> RegisteredModel | None:
    """One model prefetched like :func:`model_overview`, or None."""
    return _models_with_versions().filter(name=name).first()


def ensemble_pins(model_name: str | None = None) -> dict[str, set[int]]:
    """Model name -> the version numbers that READY ensemble versions of
    loaded models run (of ``model_name`` only, when given): they serve
    whatever their model's version policy says (:mod:`inference.serving_state`).
    One query."""
    pins: dict[str, set[int]] = {}
    rows = ModelVersion.objects.filter(
        platform=ENSEMBLE, state=ModelVersion.State.READY, model__loaded=True
    ).values_list("properties", flat=True)
    for properties in rows:
        plan = plan_of(properties)
        for name, number in plan.pins() if plan is not None else ():
            if model_name is None or name == model_name:
                pins.setdefault(name, set()).add(number)
    return pins


def ensemble_composing_models(ensemble: RegisteredModel) -> list[str]:
    """The models that the READY versions of ``ensemble`` run, sorted."""
    names = set()
    for properties in ensemble.versions.filter(state=ModelVersion.State.READY).values_list("properties", flat=True):
        plan = plan_of(properties)
        if plan is not None:
            names.update(step.model for step in plan.steps)
    return sorted(names)


def ensemble_users(model_name: str, numbers=None) -> list[tuple[str, int, int, int]]:
    """The READY ensemble versions of loaded models that run a version of
    ``model_name`` (one of ``numbers``, when given), as (ensemble, its
    version, step number, the pinned version), sorted."""
    users = []
    rows = ModelVersion.objects.filter(
        platform=ENSEMBLE, state=ModelVersion.State.READY, model__loaded=True
    ).values_list("model__name", "number", "properties")
    for ensemble, number, properties in rows:
        plan = plan_of(properties)
        for step in plan.steps if plan is not None else ():
            if step.model == model_name and (numbers is None or step.version in numbers):
                users.append((ensemble, number, step.number, step.version))
    return sorted(users)


def model_record(model: RegisteredModel, pins: dict[str, set[int]] | None = None) -> ModelRecord:
    """A model as the serving side reads it (:class:`inference.ports.ModelRecord`;
    uses prefetched versions and labels when there are). ``pins``:
    :func:`ensemble_pins` of every model (None: read for this model)."""
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
        labels=label_numbers(model),
        traffic=dict(model.traffic or {}),
        payload_log_rate=model.payload_log_rate,
        payload_log_max_bytes=model.payload_log_max_bytes,
        output_labels=dict(model.output_labels or {}),
        pinned=tuple(sorted(pins.get(model.name, ()))),
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
            )
            for v in model.versions.all()
        ),
    )


def serving(model: RegisteredModel, pins: dict[str, set[int]] | None = None) -> ServingState:
    """What of ``model`` serves now: its versions that serve (highest first)
    and its default version, computed as the serving registry computes them
    (:func:`inference.serving_state.serving_state`: version policy, traffic
    split, the versions READY ensembles pin, loaded or unloaded). ``pins``:
    :func:`ensemble_pins` of every model, for a list (None: read)."""
    return serving_state(model_record(model, pins))


def label_numbers(model: RegisteredModel) -> dict[str, int]:
    """Version label -> version number (uses prefetched labels when there are)."""
    return {label.name: label.version.number for label in model.labels.all()}


def audit_for_model(model: RegisteredModel) -> QuerySet[AuditEvent]:
    """The audit events of a model, newest first, as a lazy query to slice
    (also those of its deleted versions; not those of a deleted model that had
    the same name, perhaps another team's: the admin's audit log keeps those)."""
    return AuditEvent.objects.filter(model=model).order_by("-created_at", "-id")


def tokens_for_user(user) -> QuerySet[ApiToken]:
    """A user's API tokens, active first, newest first."""
    return ApiToken.objects.filter(user=user).select_related("team").order_by("revoked_at", "-created_at")


def token_by_hash(key_hash: str) -> ApiToken | None:
    """The unrevoked token with this hash whose user is active, or None (the
    caller refuses it when it has expired: ``token.expired``)."""
    return (
        ApiToken.objects.select_related("user", "team")
        .filter(key_hash=key_hash, revoked_at__isnull=True, user__is_active=True)
        .first()
    )


def team_get(name: str) -> Team | None:
    return Team.objects.filter(name=name).first()


def teams_for_user(user) -> QuerySet[Team]:
    """The teams a user may create models for: all for a superuser, else theirs."""
    if user.is_superuser:
        return Team.objects.order_by("name")
    return Team.objects.filter(memberships__user=user).order_by("name")


@dataclass(frozen=True)
class InferenceAccess:
    tokens: list[ApiToken]  # unrevoked tokens of active users (also expired ones: refused by name), with .user
    memberships: dict[int, frozenset[int]]  # user id -> team ids
    model_teams: dict[str, int | None]  # model name -> team id
    team_names: dict[int, str]
    team_limits: dict[int, tuple]  # team id -> (rate_limit_rps, rate_limit_burst, max_in_flight), None: not set


def inference_access() -> InferenceAccess:
    """What the inference token checker needs, in four queries."""
    tokens = list(ApiToken.objects.select_related("user").filter(revoked_at__isnull=True, user__is_active=True))
    teams = list(Team.objects.values_list("id", "name", "rate_limit_rps", "rate_limit_burst", "max_in_flight"))
    members: dict[int, set[int]] = {}
    for user_id, team_id in TeamMembership.objects.values_list("user_id", "team_id"):
        members.setdefault(user_id, set()).add(team_id)
    return InferenceAccess(
        tokens=tokens,
        memberships={user: frozenset(teams) for user, teams in members.items()},
        model_teams=dict(RegisteredModel.objects.values_list("name", "team_id")),
        team_names={team_id: name for team_id, name, *_limits in teams},
        team_limits={team_id: tuple(limits) for team_id, _name, *limits in teams if limits != [None, None, None]},
    )


def token_get(token_id: int) -> ApiToken | None:
    return ApiToken.objects.select_related("user", "team").filter(pk=token_id).first()


def user_get(user_id: int | None):
    """The user with this id, or None."""
    if user_id is None:
        return None
    return get_user_model().objects.filter(pk=user_id).first()
