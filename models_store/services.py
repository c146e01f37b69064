"""Writes to the model registry. Each write runs in a transaction, bumps the
change stamp in it (so that every server process sees the change) and, for
changes people make, records an audit event (``actor`` None: the system).

Permission checks happen before a service is called
(:mod:`models_store.permissions`); services trust their caller.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from kombu.exceptions import OperationalError

from inference import instance_groups
from inference.serving_state import served_versions
from models_store import audit, storage
from models_store.config.signatures import check_against_versions
from models_store.config.triton import ENSEMBLE, ConfigError, TritonConfig, parse_config_json, same_config
from models_store.intake import validating
from models_store.intake.uploads import StagedFile, preflight
from models_store.intake.validating import queued_log, version_set_state, version_validate
from models_store.models import (
    ModelVersion,
    RegisteredModel,
    Team,
    VersionLabel,
    VersionPolicy,
    label_validator,
    model_name_validator,
)
from models_store.registry import selectors, signature_guard
from models_store.stamp import bump_stamp
from models_store.tasks import validate_version
from models_store.webhooks import services as webhooks

__all__ = ["bump_stamp", "version_set_state", "version_validate"]  # also services of the registry

logger = logging.getLogger(__name__)

State = ModelVersion.State


class RegistryError(ValueError):
    """A registry write was refused; the message says why (HTTP 400)."""


class Conflict(RegistryError):
    """A well-formed write that the registry's current state refuses (HTTP
    409): a version policy that would serve nothing, a version label on a
    missing or not-READY version, retiring a version that is not READY or
    that a label points at, restoring one that is not retired, a taken name."""


class DuplicateVersion(Conflict):
    """The model already has a version with these bytes (HTTP 409)."""


class SignatureConflict(Conflict):
    """A change that would make a route serve a version whose signature
    breaks the route's callers (HTTP 409; :mod:`models_store.signature_guard`):
    ``differences`` lists them, one sentence each."""

    def __init__(self, what: str, differences: list[str]):
        self.differences = differences
        super().__init__(
            f"{what} would break its callers: {'; '.join(differences)}. "
            'To do it anyway, send "force": true (audited as forced).'
        )


def ensemble_blockers(model: RegisteredModel, numbers=None, doing: str = "") -> list[str]:
    """Why versions of ``model`` (``numbers``; None: any version) may not be
    deleted, retired or unloaded now: one sentence per READY ensemble
    version of a loaded model that runs one (models_store/ensembles.py);
    [] when none. ``doing``: what is refused, e.g. "delete it"."""
    users = selectors.ensemble_users(model.name, None if numbers is None else set(numbers))
    return [
        f"version {pinned} of model '{model.name}' is step {step} of ensemble '{ensemble}' (version {number}, "
        f"READY); to {doing or 'change it'}, delete, retire or unload the ensemble first"
        for ensemble, number, step, pinned in users
    ]


def _refuse_if_ensembles_use(model: RegisteredModel, numbers, doing: str) -> None:
    blockers = ensemble_blockers(model, numbers, doing)
    if blockers:
        raise Conflict(" ".join(blockers))


def _ready_versions(model: RegisteredModel) -> dict[int, ModelVersion]:
    return {v.number: v for v in model.versions.filter(state=State.READY)}


def _guard(model: RegisteredModel, what: str, route: str, before, after, force: bool) -> dict:
    """Raise SignatureConflict unless the versions ``after`` keep the
    signature of ``before`` for ``route``'s callers, or ``force``; the audit
    detail to add ({"forced": True, "differences": [...]} when forced past them)."""
    differences = signature_guard.check(model, route, before, after)
    if not differences:
        return {}
    if not force:
        raise SignatureConflict(what, differences)
    return {"forced": True, "differences": differences}


def _default_route_guard(model, what: str, force: bool, *, traffic=None, policy=None) -> dict:
    """:func:`_guard` for the default route, before and after a change of the split or the policy."""
    ready = _ready_versions(model)
    labels = {name: version.number for name, version in _label_versions(model).items()}
    before = signature_guard.default_route(model, ready, labels)
    after = signature_guard.default_route(model, ready, labels, traffic=traffic, policy=policy)
    return _guard(model, what, "the default route", [ready[n] for n in before], [ready[n] for n in after], force)


def _validate_whole(validator, value: str) -> None:
    """Run a name's RegexValidator on the whole value: its ``$`` also matches
    before a final newline, which a name may not end with."""
    validator(value)
    if value.endswith("\n"):
        raise DjangoValidationError(validator.message)


# -- models -------------------------------------------------------------------
@transaction.atomic
def model_upsert(
    name: str, config: TritonConfig | None = None, team: Team | None = None, output_labels: dict | None = None
) -> RegisteredModel:
    """Create the model ``name`` if needed (the repository import).

    A Triton config (and the labels of its outputs' label files) is applied
    when the model is created or when it differs from the one applied last,
    so that a version policy changed in the UI survives restarts until
    config.pbtxt itself changes. ``team`` is given to a model that has none.
    """
    model, created = RegisteredModel.objects.select_for_update().get_or_create(name=name, defaults={"team": team})
    changed = created
    labels = output_labels or {}
    if config is not None and (created or not same_config(config.raw, model.config) or labels != model.output_labels):
        set_config_fields(model, config, labels)
        changed = True
    if team is not None and model.team_id is None:
        model.team = team
        changed = True
    if changed:
        model.save()
        bump_stamp()
    return model


def set_config_fields(model: RegisteredModel, config: TritonConfig, output_labels: dict) -> None:
    """Set the model's Triton configuration and output labels (not saved)."""
    model.max_batch_size = config.max_batch_size
    model.version_policy = config.policy
    model.latest_versions = config.latest_versions
    model.specific_versions = list(config.specific_versions)
    model.instance_group = list(config.instance_group)
    model.config = config.raw
    model.output_labels = output_labels


@transaction.atomic
def model_set_config(
    model: RegisteredModel, config: TritonConfig, actor=None, source: str = "repository load", validating=False
) -> RegisteredModel:
    """Replace ``model``'s configuration by ``config``, as Triton's load with
    a config does ("used for loading the model instead of the one in the
    model directory"): what it leaves out takes its default (version policy
    latest 1, no dynamic batching, one instance, no parameters, no output
    labels); inputs and outputs are completed from the versions'
    signatures. Audited as ``model.config`` (with ``source``). Raises
    ConfigError when the config names another model, is an ensemble's (or
    the model is an ensemble: its versions carry its configuration,
    models_store/ensembles.py), or does not fit the
    validated versions (:func:`check_against_versions`; ``validating``: a
    new version will be validated with it), or its version policy would
    serve nothing."""
    locked = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    if config.ensemble or locked.platform == ENSEMBLE:
        raise ConfigError(
            "an ensemble's configuration comes with its versions: upload its config.pbtxt alone (no model file) "
            "as a new version of an ensemble model"
        )
    if config.name and config.name != locked.name:
        raise ConfigError(f"the config names the model {config.name!r}, not {locked.name!r}")
    validated = locked.versions.filter(state__in=(State.READY, State.UNAVAILABLE)).order_by("number")
    check_against_versions(locked, config, validated, validating)
    try:
        check_version_policy(locked, config.policy, config.latest_versions, sorted(set(config.specific_versions)))
    except RegistryError as exc:
        raise ConfigError(str(exc)) from None
    kept = {t.name for t in config.outputs if t.label_filename}
    set_config_fields(locked, config, {k: v for k, v in (locked.output_labels or {}).items() if k in kept})
    locked.save()
    audit.record(actor, "model.config", locked, source=source, config=config.raw)
    bump_stamp()
    return locked


def model_load_config(model: RegisteredModel, text: str, actor=None) -> RegisteredModel:
    """:func:`model_set_config` with Triton's JSON form of a configuration,
    as a repository load's ``config`` parameter carries it. Raises ConfigError."""
    return model_set_config(model, parse_config_json(text, source="config"), actor)


def _model_create(name: str, team: Team, actor, description: str = "") -> RegisteredModel:
    try:
        _validate_whole(model_name_validator, name)
    except DjangoValidationError as exc:
        raise RegistryError(exc.messages[0]) from None
    try:
        with transaction.atomic():
            model = RegisteredModel.objects.create(name=name, team=team, description=description, created_by=actor)
    except IntegrityError:
        raise Conflict(f"a model named '{name}' already exists") from None
    audit.record(actor, "model.create", model, team=team.name)
    bump_stamp()
    return model


def _model_get_or_create(name: str, team: Team, actor, description: str = "") -> RegisteredModel:
    """The model ``name`` for a first upload: created for ``team``, or the one
    another upload created a moment ago (parallel first uploads all become
    versions of one model), which must then belong to ``team`` too.

    Call it inside a transaction. Raises RegistryError when the model
    exists for another team.
    """
    for _attempt in range(3):
        model = RegisteredModel.objects.filter(name=name).select_related("team").first()
        if model is None:
            try:
                with transaction.atomic():  # a savepoint: the outer transaction survives a lost race
                    model = RegisteredModel.objects.create(
                        name=name, team=team, description=description, created_by=actor
                    )
            except IntegrityError:
                continue  # created meanwhile by another upload: read it
            audit.record(actor, "model.create", model, team=team.name)
            bump_stamp()
            return model
        if model.team_id != team.pk:
            owner = model.team.name if model.team else "the operators"
            raise RegistryError(f"a model named '{name}' already exists and belongs to {owner}, not team {team.name}")
        return model
    raise RegistryError(f"a model named '{name}' already exists")


def validate_model_name(name: str) -> None:
    """Raise RegistryError unless ``name`` is a well-formed model name."""
    try:
        _validate_whole(model_name_validator, name)
    except DjangoValidationError as exc:
        raise RegistryError(exc.messages[0]) from None


def model_get_or_create(name: str, team: Team, actor, description: str = "") -> RegisteredModel:
    """:func:`_model_get_or_create` for other modules of the registry (an ensemble's first upload)."""
    return _model_get_or_create(name, team, actor, description)


@transaction.atomic
def model_create(name: str, team: Team, actor, description: str = "") -> RegisteredModel:
    """Register an empty model owned by ``team``. Raises RegistryError for a
    malformed name, Conflict for a taken one."""
    return _model_create(name, team, actor, description)


@transaction.atomic
def model_update(model: RegisteredModel, actor, *, description: str) -> RegisteredModel:
    """Change a model's description."""
    model.description = description
    model.save(update_fields=["description", "updated_at"])
    audit.record(actor, "model.update", model, description=description)
    bump_stamp()
    return model


def check_version_policy(model: RegisteredModel, policy: str, latest: int, specific: list[int]) -> None:
    """Raise RegistryError unless the policy is well formed, and Conflict
    unless it lists existing versions and serves at least one READY version
    (a ``latest`` or ``all`` policy of a model without READY versions is
    accepted: it serves the first one to come)."""
    if policy not in VersionPolicy.values:
        raise RegistryError(f"unknown version policy '{policy}' (one of: {', '.join(VersionPolicy.values)})")
    if policy == VersionPolicy.LATEST and latest < 1:
        raise RegistryError("a latest policy serves at least 1 version")
    states = dict(model.versions.values_list("number", "state"))
    if policy == VersionPolicy.SPECIFIC:
        if not specific:
            raise Conflict("a specific policy lists at least one version number (give specific_versions)")
        missing = sorted(n for n in set(specific) if n not in states)
        if missing:
            raise Conflict(f"model '{model.name}' has no version {', '.join(map(str, missing))}")
    ready = [n for n, state in states.items() if state == State.READY]
    if not served_versions(policy, ready, latest, specific) and (ready or policy == VersionPolicy.SPECIFIC):
        listed = ", ".join(f"{n} ({states[n]})" for n in sorted(set(specific)))
        raise Conflict(
            f"this version policy would serve no version of '{model.name}': "
            + (f"it lists {listed}; " if policy == VersionPolicy.SPECIFIC else "")
            + f"READY versions: {', '.join(map(str, sorted(ready))) or 'none'}"
        )


@transaction.atomic
def model_set_policy(
    model: RegisteredModel, policy: str, latest: int = 1, specific: list[int] = (), actor=None, force: bool = False
) -> RegisteredModel:
    """Set the version policy (``latest`` N, ``all``, ``specific`` numbers).

    Raises RegistryError for a malformed policy, Conflict for one that
    serves nothing (see :func:`check_version_policy`), SignatureConflict
    when the default route would serve a version that breaks its callers
    (unless ``force``).
    """
    model = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    specific = sorted({int(n) for n in specific})
    check_version_policy(model, policy, latest, specific)
    forced = _default_route_guard(model, "this version policy", force, policy=(policy, latest, specific))
    model.version_policy = policy
    model.latest_versions = latest if policy == VersionPolicy.LATEST else model.latest_versions
    model.specific_versions = specific if policy == VersionPolicy.SPECIFIC else []
    model.save(update_fields=["version_policy", "latest_versions", "specific_versions", "updated_at"])
    audit.record(actor, "model.policy", model, policy=policy, latest=latest, specific=specific, **forced)
    bump_stamp()
    return model


# -- versions -----------------------------------------------------------------
@transaction.atomic
def version_create(
    model: RegisteredModel,
    *,
    artifact: str,
    sha256: str,
    size: int,
    state: str,
    inputs: list | None = None,
    outputs: list | None = None,
    properties: dict | None = None,
    reason: str = "",
    log: list[str] | None = None,
    source: str = "",
    uploaded_by=None,
    preferred_number: int | None = None,
    action: str = "version.import",
) -> ModelVersion:
    """Add a version. Its number is ``preferred_number`` when that is above
    every number the model has used, else the next number (never reused).
    The audit event ``action`` is recorded with ``uploaded_by`` as the actor.

    Raises DuplicateVersion when the model already has a version with these bytes.
    """
    locked = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    existing = locked.versions.filter(sha256=sha256).first()
    if existing is not None:
        raise DuplicateVersion(
            f"model '{locked.name}' already has these bytes (sha256 {sha256[:12]}…) as version "
            f"{existing.number} ({existing.state})"
        )
    number = locked.last_version_number + 1
    if preferred_number is not None and preferred_number > locked.last_version_number:
        number = preferred_number
    locked.last_version_number = number
    locked.save(update_fields=["last_version_number", "updated_at"])
    version = ModelVersion.objects.create(
        model=locked,
        number=number,
        artifact=artifact,
        sha256=sha256,
        size=size,
        state=state,
        inputs=inputs or [],
        outputs=outputs or [],
        properties=properties or {},
        reason=reason,
        log=log or [],
        source=source,
        uploaded_by=uploaded_by,
    )
    audit.record(uploaded_by, action, locked, number, sha256=sha256, size=size, state=state, source=source)
    bump_stamp()
    return version


def version_upload(
    model_name: str,
    staged: StagedFile,
    actor,
    *,
    team: Team | None = None,
    description: str = "",
    config: TritonConfig | None = None,
) -> ModelVersion:
    """Register an uploaded file as the next version of ``model_name``.

    When the model does not exist it is created for ``team`` (required then),
    in the same transaction as the version; when a parallel upload created it
    meanwhile for the same team, this file becomes one of its versions. Order: :func:`uploads.preflight`
    (empty, not ONNX, external data: UploadRefused), the duplicate check
    (DuplicateVersion), the move of the staged file into the store, then the
    version row (state UPLOADED) and its audit event in one transaction;
    validation is scheduled when that commits. If the row cannot be written
    the moved artifact is removed again, so an error leaves neither a version
    nor a file (a crash in between leaves an orphan that ``cleanup_store``
    removes). ``config`` (a config.pbtxt given with the upload) replaces the
    model's configuration in that transaction (:func:`model_set_config`), so
    the new version is validated with it.

    Raises UploadRefused, DuplicateVersion or RegistryError (also for a
    config the model cannot take).
    """
    preflight(staged)
    model = RegisteredModel.objects.filter(name=model_name).first()
    if model is None and team is None:
        raise RegistryError(f"unknown model '{model_name}': give a team to create it")
    if model is not None and team is not None and model.team_id != team.pk:
        # Created a moment ago by another team's upload (the caller found no model): not theirs.
        owner = model.team.name if model.team else "the operators"
        raise RegistryError(f"a model named '{model_name}' already exists and belongs to {owner}, not team {team.name}")
    if model is not None and model.platform == ENSEMBLE:
        raise RegistryError(
            f"model '{model_name}' is an ensemble: upload its config.pbtxt alone (no model file) as a new version"
        )
    if model is not None:
        duplicate = model.versions.filter(sha256=staged.sha256).first()
        if duplicate is not None:
            raise DuplicateVersion(
                f"model '{model.name}' already has these bytes (sha256 {staged.sha256[:12]}…) as version "
                f"{duplicate.number} ({duplicate.state})"
            )
    else:
        try:
            _validate_whole(model_name_validator, model_name)
        except DjangoValidationError as exc:
            raise RegistryError(exc.messages[0]) from None
    here = validating.validates_here()
    try:
        stored = storage.commit_staged(model_name, staged.directory, staged.sha256, staged.size)
    except BaseException:  # e.g. the storage backend is away: no local copy stays behind either
        _remove_if_unreferenced(f"{model_name}/{staged.sha256}/{storage.MODEL_FILENAME}")
        raise
    try:
        with transaction.atomic():
            if model is None:
                model = _model_get_or_create(model_name, team, actor, description)
            version = version_create(
                model,
                artifact=stored.relpath,
                sha256=stored.sha256,
                size=stored.size,
                state=State.UPLOADED,
                source=f"upload: {staged.name}",
                uploaded_by=actor,
                action="version.upload",
                log=[] if here else queued_log(validate_version.app.conf.task_default_queue),
            )
            if config is not None:
                model_set_config(model, config, actor, source="upload", validating=True)
            if here and staged.size > settings.VALIDATE_IN_REQUEST_MAX_BYTES:  # big: off the request
                transaction.on_commit(lambda: validating.validate_in_background(version.pk), robust=True)
            else:
                transaction.on_commit(lambda: schedule_validation(version.pk, here), robust=True)
    except ConfigError as exc:
        _remove_if_unreferenced(stored.relpath)
        raise RegistryError(str(exc)) from None
    except BaseException:
        _remove_if_unreferenced(stored.relpath)
        raise
    return version


def schedule_validation(version_id: int, here: bool | None = None) -> None:
    """Validate the version in this process (``here``, default
    :func:`validating.validates_here`: the embedded server, or no worker
    takes validation tasks) or queue the validation task. When the broker
    cannot take it (Redis down or unreachable), validate in this process
    instead: the version never stays UPLOADED with nobody to validate it."""
    if here is None:
        here = validating.validates_here()
    if not here:
        try:
            validate_version.delay(version_id)
            return
        except (OperationalError, ConnectionError) as exc:
            logger.warning("could not queue the validation of version id %s (%s); validating it here", version_id, exc)
    validating.validate_here(version_id)


def _remove_if_unreferenced(relpath: str) -> None:
    """Remove an artifact whose version row was not written; when that fails
    too (the database or the storage backend is away), the scheduled
    cleanup removes it (ORPHAN_MIN_AGE_SECONDS, :mod:`models_store.maintenance`)."""
    try:
        if not ModelVersion.objects.filter(artifact=relpath).exists():
            storage.remove_artifact(relpath)
    except Exception as exc:
        logger.warning("left %s for the scheduled cleanup: %s: %s", relpath, type(exc).__name__, exc)


@transaction.atomic
def version_retire(version: ModelVersion, actor) -> ModelVersion:
    """Stop serving a READY version (state UNAVAILABLE); it can be restored.
    Raises Conflict when it is not READY, a version label points at it, or
    a READY ensemble runs it (naming the ensemble)."""
    version = ModelVersion.objects.select_for_update().select_related("model").get(pk=version.pk)
    if version.state != State.READY:
        raise Conflict(f"only a READY version can be retired; version {version.number} is {version.state}")
    _refuse_if_ensembles_use(version.model, [version.number], "retire it")
    labels = sorted(version.labels.values_list("name", flat=True))
    if labels:
        raise Conflict(
            f"version label(s) {', '.join(labels)} point at version {version.number}; move or delete them first"
        )
    when = timezone.now().strftime("%Y-%m-%d %H:%M UTC")
    who = actor.get_username() if actor is not None else audit.SYSTEM
    version_set_state(version, State.UNAVAILABLE, f"retired by {who} on {when}")
    audit.record(actor, "version.retire", version.model, version.number)
    return version


@transaction.atomic
def version_restore(version: ModelVersion, actor) -> ModelVersion:
    """Serve a retired version again (UNAVAILABLE -> READY).
    Raises Conflict for a version that is not retired."""
    version = ModelVersion.objects.select_for_update().select_related("model").get(pk=version.pk)
    if version.state != State.UNAVAILABLE:
        raise Conflict(f"only a retired version can be restored; version {version.number} is {version.state}")
    version_set_state(version, State.READY)
    audit.record(actor, "version.restore", version.model, version.number)
    return version


@transaction.atomic
def version_delete(version: ModelVersion, actor=None) -> None:
    """Delete a version row (and the labels pointing at it); its artifact
    directory is removed after commit unless another version still uses it.
    The number is not reused. Raises Conflict, naming the ensemble, while
    a READY ensemble runs it, and, naming the split, while the
    model's traffic split sends requests to a label on it; a label on it
    that the split gives weight 0 leaves the split (audited ``traffic.set``),
    so that a split never names a label that does not exist."""
    model = RegisteredModel.objects.select_for_update().get(pk=version.model_id)
    _refuse_if_ensembles_use(model, [version.number], "delete it")
    labels = sorted(version.labels.values_list("name", flat=True))
    _release_from_split(model, labels, actor, f"version {version.number}")
    _version_remove(version, actor, labels)


def _version_remove(version: ModelVersion, actor, labels: list[str]) -> None:
    artifact = version.artifact
    audit.record(actor, "version.delete", version.model, version.number, sha256=version.sha256, labels=labels)
    version.delete()
    bump_stamp()
    if artifact and not ModelVersion.objects.filter(artifact=artifact).exists():  # an ensemble's has none
        transaction.on_commit(lambda: storage.remove_artifact(artifact))


# -- webhooks (models_store/webhooks.py) -----------------------------------------
def _actor_name(actor) -> str:
    return actor.get_username() if actor is not None else audit.SYSTEM


def _label_moved(model: RegisteredModel, label: str, previous, version, actor, forced: bool = False) -> None:
    """The ``label.moved`` event: ``version`` None when the label was removed, ``previous`` None when it is new."""
    if previous != version:
        webhooks.model_event(
            model, "label.moved", label=label, version=version, previous_version=previous, forced=forced,
            actor=_actor_name(actor),
        )  # fmt: skip


def _traffic_changed(model: RegisteredModel, action: str, before: dict, actor, forced: bool = False) -> None:
    """The ``traffic.changed`` event (``action``: set, promote, rollback, or dropped: labels left the split)."""
    traffic = model.traffic or {}
    if traffic != before:
        webhooks.model_event(
            model, "traffic.changed", action=action, traffic=traffic, before=before,
            versions=_traffic_versions(model, traffic), forced=forced, actor=_actor_name(actor),
        )  # fmt: skip


# -- version labels -----------------------------------------------------------
@transaction.atomic
def label_set(model: RegisteredModel, name: str, number: int, actor=None, force: bool = False) -> VersionLabel:
    """Point label ``name`` at version ``number``; the version must be READY.

    Raises RegistryError for a malformed name, Conflict for a missing
    version or one that is not READY, SignatureConflict when the label
    moves to a version whose signature breaks its callers (unless ``force``).
    """
    try:
        _validate_whole(label_validator, name)
    except DjangoValidationError as exc:
        raise RegistryError(exc.messages[0]) from None
    model = RegisteredModel.objects.select_for_update().get(pk=model.pk)  # against a concurrent version delete
    version = model.versions.filter(number=number).first()
    if version is None:
        raise Conflict(f"model '{model.name}' has no version {number}")
    if version.state != State.READY:
        raise Conflict(
            f"label '{name}' may only point at a READY version; version {number} of '{model.name}' is {version.state}"
        )
    current = VersionLabel.objects.filter(model=model, name=name).select_related("version").first()
    forced = {}
    if current is not None:
        what = f"moving label '{name}' from version {current.version.number} to {number}"
        forced = _guard(model, what, f"label '{name}'", [current.version], [version], force)
    label, _ = VersionLabel.objects.update_or_create(model=model, name=name, defaults={"version": version})
    audit.record(actor, "label.set", model, number, label=name, **forced)
    _label_moved(model, name, current.version.number if current else None, number, actor, bool(forced))
    bump_stamp()
    return label


@transaction.atomic
def label_delete(model: RegisteredModel, name: str, actor=None) -> bool:
    """Remove a label; False when the model has no such label. Raises
    Conflict, naming the split, while the traffic split sends requests to
    it; a label the split gives weight 0 leaves the split (audited
    ``traffic.set``)."""
    model = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    label = VersionLabel.objects.filter(model=model, name=name).first()
    if label is None:
        return False
    _release_from_split(model, [name], actor)
    previous = label.version.number
    label.delete()
    audit.record(actor, "label.delete", model, label=name)
    _label_moved(model, name, previous, None, actor)
    bump_stamp()
    return True


@transaction.atomic
def model_set_loaded(
    model: RegisteredModel, loaded: bool, actor=None, unload_dependents: bool = False
) -> RegisteredModel:
    """Load or unload a model (Triton's repository extension): an unloaded
    model serves no version in any process; its versions stay stored.
    Raises Conflict (naming the ensembles) when unloading a model that a
    READY ensemble runs. ``unload_dependents`` (Triton's unload parameter)
    unloading an ensemble also unloads the models its READY versions run,
    each unless another loaded ensemble still runs it (that one stays
    loaded); each unload is audited, naming the ensemble."""
    locked = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    if not loaded and locked.loaded:
        _refuse_if_ensembles_use(locked, None, "unload it")
    if locked.loaded != loaded:
        locked.loaded = loaded
        locked.save(update_fields=["loaded", "updated_at"])
        audit.record(actor, "model.load" if loaded else "model.unload", locked)
        bump_stamp()
    if not loaded and unload_dependents and locked.platform == ENSEMBLE:
        for name in selectors.ensemble_composing_models(locked):
            step = RegisteredModel.objects.select_for_update().filter(name=name, loaded=True).first()
            if step is not None and not ensemble_blockers(step):
                step.loaded = False
                step.save(update_fields=["loaded", "updated_at"])
                audit.record(actor, "model.unload", step, dependent_of=locked.name)
                bump_stamp()
    return locked


@transaction.atomic
def model_set_instance_group(model: RegisteredModel, groups: list[dict], actor=None) -> RegisteredModel:
    """Replace a model's instance groups (Triton's ``instance_group``): each
    ``{"kind": KIND_AUTO|KIND_GPU|KIND_CPU, "count": n >= 1, "gpus": [ints]}``
    (``gpus`` only for KIND_GPU; defaults and rules:
    :mod:`inference.instance_groups`). Raises RegistryError for anything else."""
    try:
        clean = instance_groups.validate(groups)
    except instance_groups.InstanceGroupError as exc:
        raise RegistryError(str(exc)) from None
    locked = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    locked.instance_group = clean
    locked.save(update_fields=["instance_group", "updated_at"])
    audit.record(actor, "model.instance_group", locked, instance_group=clean)
    bump_stamp()
    return locked


@transaction.atomic
def model_delete(model: RegisteredModel, actor=None) -> None:
    """Delete a model with its versions (their artifacts are removed after
    commit), labels and traffic split. Raises Conflict (naming the
    ensembles) while a READY ensemble runs one of its versions."""
    _refuse_if_ensembles_use(model, None, "delete the model")
    for version in list(model.versions.all()):
        _version_remove(version, actor, sorted(version.labels.values_list("name", flat=True)))
    audit.record(actor, "model.delete", model, team=model.team.name if model.team else "")
    webhooks.model_event(model, "model.deleted", actor=_actor_name(actor))
    model.delete()
    bump_stamp()


@transaction.atomic
def admin_recorded(actor, obj, action: str, **detail) -> None:
    """Record a change made in the Django admin (``action``: add, change,
    delete) and bump the stamp, so that servers and token scopes follow it."""
    model = obj if isinstance(obj, RegisteredModel) else getattr(obj, "model", None)
    version = getattr(obj, "number", None)
    if model is not None and model.pk is None:
        model = None
    audit.record(actor, f"admin.{action}", model, version, object=f"{type(obj).__name__} {obj}", **detail)
    bump_stamp()


# -- traffic split --------------------------------------------------------------
STABLE, CANARY = "stable", "canary"


def _label_versions(model: RegisteredModel) -> dict[str, ModelVersion]:
    return {label.name: label.version for label in model.labels.select_related("version")}


def _check_traffic(model: RegisteredModel, weights: dict[str, int]) -> dict[str, int]:
    """The split as stored (sorted by label), or Conflict: weights are whole
    percentages summing to 100, at least one above 0, each naming a version
    label of the model that points at a READY version ({} clears the split)."""
    if not weights:
        return {}
    for label, weight in weights.items():
        if type(weight) is not int or not 0 <= weight <= 100:
            raise RegistryError(f"the weight of label '{label}' must be an integer from 0 to 100")
    total = sum(weights.values())
    if total != 100:
        raise Conflict(f"the weights of a traffic split add up to 100, not {total}")
    labels = _label_versions(model)
    for label in sorted(weights):
        version = labels.get(label)
        if version is None:
            known = ", ".join(sorted(labels)) or "none"
            raise Conflict(f"model '{model.name}' has no version label '{label}' (labels: {known})")
        if weights[label] > 0 and version.state != State.READY:
            raise Conflict(f"label '{label}' points at version {version.number}, which is {version.state}, not READY")
    return dict(sorted(weights.items()))


def _traffic_versions(model: RegisteredModel, traffic: dict[str, int]) -> dict[str, int]:
    labels = _label_versions(model)
    return {label: labels[label].number for label in traffic if label in labels}


def split_blockers(model: RegisteredModel, labels, what: str = "") -> list[str]:
    """Why ``labels`` of ``model`` (those on ``what``, e.g. "version 3",
    when given) may not be deleted now: one sentence per label its traffic
    split sends requests to (weight above 0); [] when none."""
    traffic = model.traffic or {}
    on = f", which points at {what}" if what else ""
    return [
        f"the traffic split of '{model.name}' sends {traffic[label]}% of its requests to label '{label}'{on}; "
        "change the split first"
        for label in sorted(labels)
        if traffic.get(label, 0) > 0
    ]


def _release_from_split(locked: RegisteredModel, labels, actor, what: str = "") -> None:
    """Before ``labels`` of the (locked) model go: Conflict when its split
    sends requests to one (:func:`split_blockers`); the ones it gives weight
    0 are dropped from the split, audited as ``traffic.set``. A split thus
    never names a label that does not exist: a label created later under
    the same name gets no request until a split names it again."""
    blockers = split_blockers(locked, labels, what)
    if blockers:
        raise Conflict(" ".join(blockers))
    before = locked.traffic or {}
    dropped = sorted(set(labels) & set(before))
    if not dropped:
        return
    locked.traffic = {label: weight for label, weight in before.items() if label not in dropped}
    locked.save(update_fields=["traffic", "updated_at"])
    audit.record(
        actor, "traffic.set", locked, traffic=locked.traffic, before=before,
        versions=_traffic_versions(locked, locked.traffic), dropped=dropped,
    )  # fmt: skip
    _traffic_changed(locked, "dropped", before, actor)
    bump_stamp()


@transaction.atomic
def traffic_set(model: RegisteredModel, weights: dict[str, int], actor=None, force: bool = False) -> RegisteredModel:
    """Split the requests that name no version between version labels by
    weight (e.g. ``{"stable": 90, "canary": 10}``; ``{}`` clears the split).
    The versions the split sends requests to serve, whatever the version
    policy says. Raises RegistryError (a weight out of range), Conflict
    (weights not summing to 100, an unknown label, a label on a version
    that is not READY), SignatureConflict when the default route would
    serve a version whose signature breaks its callers (unless ``force``)."""
    locked = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    traffic = _check_traffic(locked, dict(weights))
    forced = _default_route_guard(locked, "this traffic split", force, traffic=traffic)
    before = locked.traffic or {}
    locked.traffic = traffic
    locked.save(update_fields=["traffic", "updated_at"])
    audit.record(
        actor, "traffic.set", locked, traffic=traffic, before=before, versions=_traffic_versions(locked, traffic),
        **forced,
    )  # fmt: skip
    _traffic_changed(locked, "set", before, actor, bool(forced))
    bump_stamp()
    return locked


def _ready_label(model: RegisteredModel, labels: dict, name: str, purpose: str):
    """The READY version label ``name`` points at; raises Conflict otherwise."""
    version = labels.get(name)
    if version is None:
        raise Conflict(f"model '{model.name}' has no version label '{name}' {purpose}")
    if version.state != State.READY:
        raise Conflict(f"label '{name}' points at version {version.number}, which is {version.state}, not READY")
    return version


@transaction.atomic
def traffic_promote(model: RegisteredModel, actor=None, force: bool = False) -> RegisteredModel:
    """Promote the canary: label ``stable`` moves to the version of label
    ``canary``, and the split sends every request to it (``stable`` 100,
    ``canary`` 0). Raises Conflict without a ``canary`` label on a READY
    version, SignatureConflict when ``stable``'s callers would break
    (unless ``force``)."""
    locked = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    labels = _label_versions(locked)
    canary = _ready_label(locked, labels, CANARY, "to promote")
    stable = labels.get(STABLE)
    forced = {}
    if stable is not None:
        what = f"promoting: moving label '{STABLE}' from version {stable.number} to {canary.number}"
        forced = _guard(locked, what, f"label '{STABLE}'", [stable], [canary], force)
    before = locked.traffic or {}
    VersionLabel.objects.update_or_create(model=locked, name=STABLE, defaults={"version": canary})
    locked.traffic = {CANARY: 0, STABLE: 100}
    locked.save(update_fields=["traffic", "updated_at"])
    audit.record(
        actor, "traffic.promote", locked, canary.number,
        stable_before=stable.number if stable else None, stable=canary.number, before=before, traffic=locked.traffic,
        **forced,
    )  # fmt: skip
    _label_moved(locked, STABLE, stable.number if stable else None, canary.number, actor, bool(forced))
    _traffic_changed(locked, "promote", before, actor, bool(forced))
    bump_stamp()
    return locked


@transaction.atomic
def traffic_rollback(model: RegisteredModel, actor=None) -> RegisteredModel:
    """Roll the canary back: every request that names no version goes to
    label ``stable`` again (``stable`` 100, ``canary`` 0; the labels stay).
    Raises Conflict without a ``stable`` label on a READY version."""
    locked = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    labels = _label_versions(locked)
    stable = _ready_label(locked, labels, STABLE, "to roll back to")
    before = locked.traffic or {}
    locked.traffic = {CANARY: 0, STABLE: 100} if CANARY in labels else {STABLE: 100}
    locked.save(update_fields=["traffic", "updated_at"])
    canary = labels.get(CANARY)
    audit.record(
        actor, "traffic.rollback", locked, stable.number,
        canary=canary.number if canary else None, before=before, traffic=locked.traffic,
    )  # fmt: skip
    _traffic_changed(locked, "rollback", before, actor)
    bump_stamp()
    return locked


# -- payload logging ----------------------------------------------------------------
#: Largest tensor bytes a logged pair may hold (a record's size cap).
MAX_PAYLOAD_LOG_BYTES = 16 * 1024 * 1024


@transaction.atomic
def model_set_payload_logging(model: RegisteredModel, rate: float, max_bytes: int, actor=None) -> RegisteredModel:
    """Log a share ``rate`` (0 to 1; 0: off) of the model's inferences, request
    and response, to the operators' sink, tensors up to ``max_bytes``.
    Raises RegistryError for values out of range."""
    if not 0 <= rate <= 1:
        raise RegistryError("payload_log_rate must be between 0 and 1")
    if not 0 <= max_bytes <= MAX_PAYLOAD_LOG_BYTES:
        raise RegistryError(f"payload_log_max_bytes must be between 0 and {MAX_PAYLOAD_LOG_BYTES}")
    locked = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    locked.payload_log_rate, locked.payload_log_max_bytes = rate, max_bytes
    locked.save(update_fields=["payload_log_rate", "payload_log_max_bytes", "updated_at"])
    audit.record(actor, "model.payload_logging", locked, rate=rate, max_bytes=max_bytes)
    bump_stamp()
    return locked


# -- team limits ------------------------------------------------------------------
@transaction.atomic
def team_set_limits(team: Team, *, rate: float | None, burst: int | None, in_flight: int | None, actor=None) -> Team:
    """Set a team's own inference limits (operators): requests per second,
    burst, inferences in flight; None: the default (RATE_LIMIT_TEAM_*), 0:
    unlimited. Raises RegistryError for a negative value."""
    for name, value in (("rate", rate), ("burst", burst), ("in_flight", in_flight)):
        if value is not None and value < 0:
            raise RegistryError(f"{name} may not be negative")
    locked = Team.objects.select_for_update().get(pk=team.pk)
    locked.rate_limit_rps, locked.rate_limit_burst, locked.max_in_flight = rate, burst, in_flight
    locked.save(update_fields=["rate_limit_rps", "rate_limit_burst", "max_in_flight"])
    audit.record(actor, "team.limits", None, team=locked.name, rate=rate, burst=burst, in_flight=in_flight)
    bump_stamp()
    return locked
