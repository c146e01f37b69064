"""Uploads: a file (or an ensemble's config.pbtxt) becomes the next version of
a model, and its validation is scheduled. The web UI and the management API
call :func:`receive` before the body is read, :func:`check_upload` before
it is parsed, then :func:`upload` (the caller's permissions checked here);
scripts and tests call :func:`version_upload` directly. Each takes keyword
arguments only.

Errors: NotFound (no such team, or a new model without one), AccessDenied,
Conflict (the name is another team's model the caller may not see; the same
bytes twice: DuplicateVersion), RegistryError (a malformed name or
config.pbtxt), UploadRefused (not an ONNX model with exactly its data files,
too large: 413).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from kombu.exceptions import OperationalError

from models_store import storage
from models_store.accounts import selectors as accounts
from models_store.config.triton import ENSEMBLE, ConfigError, TritonConfig, parse_config, parse_config_json
from models_store.errors import Conflict, NotFound, RegistryError, UploadRefused
from models_store.intake import ensembles, uploads, validating
from models_store.registry import selectors as registry
from models_store.registry.services import models as model_services
from models_store.registry.services import states
from models_store.tasks import validate_version

logger = logging.getLogger(__name__)

State = states.State


def receive(*, request) -> uploads.StagingUploadHandler:
    """Make ``request`` (a Django HttpRequest, before its body is read)
    stream its files into the store's staging area; call ``discard()`` on
    the handler when done (:mod:`models_store.intake.uploads`)."""
    return uploads.install(request)


def version_upload(
    *,
    model_name: str,
    staged: uploads.StagedFile,
    actor,
    team=None,
    description: str = "",
    config: TritonConfig | None = None,
):
    """Register an uploaded file as the next version of ``model_name``.

    When the model does not exist it is created for ``team`` (required then),
    in the same transaction as the version; when a parallel upload created it
    meanwhile for the same team, this file becomes one of its versions. Order: :func:`uploads.preflight`
    (empty, not ONNX, external data: UploadRefused; when the validation runs off the request, i.e. queued or
    a file above VALIDATE_IN_REQUEST_MAX_BYTES, a file without data files is not read here: only the outline
    its bytes showed as they streamed in is checked, and validation fails the version with the reason for
    the rest, so that the answer comes as soon as the file is stored), the duplicate check
    (DuplicateVersion), the move of the staged file into the store, then the
    version row (state UPLOADED) and its audit event in one transaction;
    validation is scheduled when that commits. If the row cannot be written
    the moved artifact is removed again, so an error leaves neither a version
    nor a file (a crash in between leaves an orphan that ``cleanup_store``
    removes). ``config`` (a config.pbtxt given with the upload) replaces the
    model's configuration in that transaction (``model_set_config``), so
    the new version is validated with it.

    Raises UploadRefused, DuplicateVersion, Conflict (a file for an ensemble model) or RegistryError (also for a
    config the model cannot take).
    """
    here = validating.validates_here()
    # Validated before the answer (here, small) or off the request: then nothing reads the model in it.
    in_request = here and staged.size <= settings.VALIDATE_IN_REQUEST_MAX_BYTES
    uploads.preflight(staged, parse=in_request)
    model = registry.model_get(model_name)
    if model is None and team is None:
        raise RegistryError(f"unknown model '{model_name}': give a team to create it")
    if model is not None and team is not None:
        # Created a moment ago by another team's upload (the caller found no model): not theirs.
        model_services.refuse_other_team(model=model, team=team)
    if model is not None and model.platform == ENSEMBLE:  # the registry's state, not the request's shape: 409
        raise Conflict(
            f"model '{model_name}' is an ensemble: upload its config.pbtxt alone (no model file) as a new version"
        )
    if model is not None:
        states.refuse_duplicate(model=model, sha256=staged.sha256)
    else:
        model_services.validate_model_name(name=model_name)
    try:
        stored = storage.commit_staged(model_name, staged.directory, staged.sha256, staged.size)
    except BaseException:  # e.g. the storage backend is away: no local copy stays behind either
        _remove_if_unreferenced(f"{model_name}/{staged.sha256}/{storage.MODEL_FILENAME}")
        raise
    try:
        with transaction.atomic():
            if model is None:
                model = model_services.model_get_or_create(
                    name=model_name, team=team, actor=actor, description=description
                )
            version = states.version_create(
                model=model, artifact=stored.relpath, sha256=stored.sha256, size=stored.size, state=State.UPLOADED,
                source=f"upload: {staged.name}", uploaded_by=actor, action="version.upload",
                log=[] if here else validating.queued_log(validate_version.app.conf.task_default_queue),
            )  # fmt: skip
            if config is not None:
                model_services.model_set_config(
                    model=model, config=config, actor=actor, source="upload", validating=True
                )
            if here and staged.size > settings.VALIDATE_IN_REQUEST_MAX_BYTES:  # big: off the request
                transaction.on_commit(lambda: validating.validate_in_background(version.pk), robust=True)
            else:
                transaction.on_commit(lambda: schedule_validation(version_id=version.pk, here=here), robust=True)
    except ConfigError as exc:
        _remove_if_unreferenced(stored.relpath)
        raise RegistryError(str(exc)) from None
    except BaseException:
        _remove_if_unreferenced(stored.relpath)
        raise
    return version


def version_from_load(*, model_name: str, model_file: bytes, config_text: str, origin: str, actor):
    """A model file and its configuration given in a repository load (Triton's
    ``config`` and ``file:<version>/model.onnx`` parameters) as the next
    version of the existing model ``model_name``: staged, then registered and
    validated exactly like an upload (:func:`version_upload`, audited as
    ``version.upload`` by ``actor`` with ``origin`` as its source). Bytes
    that are already one of its versions make no new one: that version is
    returned (the configuration still replaces the model's). Raises
    NotFound (no such model), RegistryError (a config the model cannot
    take, or not Triton's JSON form), UploadRefused."""
    model = registry.model_get(model_name)
    if model is None:
        raise NotFound(f"unknown model '{model_name}'")
    try:
        config = parse_config_json(config_text, source="config")
    except ConfigError as exc:
        raise RegistryError(str(exc)) from None
    staged = uploads.stage_bytes(model_file, origin)
    try:
        existing = registry.version_by_sha256(model, staged.sha256)
        if existing is not None:
            try:
                model_services.model_set_config(model=model, config=config, actor=actor)
            except ConfigError as exc:
                raise RegistryError(str(exc)) from None
            return existing
        return version_upload(model_name=model_name, staged=staged, actor=actor, config=config)
    finally:
        storage.remove_path(staged.directory)


def schedule_validation(*, version_id: int, here: bool | None = None) -> None:
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
        if not registry.artifact_in_use(relpath):
            storage.remove_artifact(relpath)
    except Exception as exc:
        logger.warning("left %s for the scheduled cleanup: %s: %s", relpath, type(exc).__name__, exc)


# -- uploads people make (web UI, management API) -------------------------------------
def _require_upload_to(user, token, model) -> None:
    """Refuse an upload to an existing model the user may not change; one
    the user may not see is a name taken (Conflict), not named further."""
    if not accounts.can_see_model(user, model, token):
        raise Conflict(f"the model name '{model.name}' is taken (by a model of another team); choose another name")
    accounts.require_change_model(user, model, token, "version.upload")


def check_upload(*, user, token, model_name: str) -> None:
    """Refuse an upload to an existing model the user (through ``token``, an
    ApiToken or None) may not change, before the body is read (a new model
    is checked once its team is known)."""
    model = registry.model_get(model_name)
    if model is not None:
        _require_upload_to(user, token, model)


def check_new_model(*, user, token, team_name: str) -> None:
    """Refuse (AccessDenied) a new model for team ``team_name`` that the user
    may not create models in (``model.create``); an unknown team is left to
    the form (or :func:`upload`) to refuse."""
    team = accounts.team_get(team_name)
    if team is not None:
        accounts.require_team(user, team, token, "model.create")


def parse_upload_config(*, text: str) -> TritonConfig | None:
    """An upload's config.pbtxt text, parsed and checked (None when empty);
    RegistryError naming a malformed or unsupported field."""
    if not text.strip():
        return None
    try:
        config = parse_config(text, source="config.pbtxt")
    except ConfigError as exc:
        raise RegistryError(str(exc)) from None
    if any(t.label_filename for t in config.outputs):
        raise RegistryError(
            "config.pbtxt: label_filename needs its label file in the model's directory: import the model's "
            "repository directory (manage.py import_repository) to use label files"
        )
    return config


def upload(
    *,
    user,
    token,
    model_name: str,
    staged: uploads.StagedFile | None,
    team_name: str = "",
    description: str = "",
    config: str = "",
):
    """Upload ``staged`` as the next version of ``model_name`` for ``user``
    (through ``token``, an ApiToken or None); a new model needs
    ``team_name`` (a team the user belongs to): without it, or with a team
    that does not exist, NotFound. ``config``: a config.pbtxt for the model
    (replacing its configuration; the new version is validated with it);
    RegistryError (400) naming what it cannot take, before anything is
    stored. An ensemble's config.pbtxt (``platform: "ensemble"``) comes
    without a file (``staged`` None): it becomes a READY version pinning
    the versions it composes (models_store/intake/ensembles.py), or is refused
    (RegistryError 400, Conflict 409); without a file and without an
    ensemble's config, UploadRefused."""
    parsed = parse_upload_config(text=config)
    if parsed is not None and parsed.ensemble:
        if staged is not None:
            raise RegistryError("an ensemble is its config.pbtxt alone: send no model file with it")
        return _upload_ensemble(user, token, model_name, parsed, team_name, description)
    if staged is None:
        raise UploadRefused(
            "no model file in the upload: send the ONNX file as multipart field 'file' "
            '(or, for an ensemble, a config.pbtxt with platform: "ensemble" alone)'
        )
    _model, team = _upload_target(user, token, model_name, team_name)
    return version_upload(
        model_name=model_name, staged=staged, actor=user, team=team, description=description, config=parsed
    )


def _upload_target(user, token, model_name: str, team_name: str):
    """(the existing model the user may upload to, None) or (None, the team
    a new model is created for); NotFound, AccessDenied or Conflict otherwise."""
    model = registry.model_get(model_name)
    team = None
    if model is not None:
        _require_upload_to(user, token, model)
    else:
        if not team_name:
            raise NotFound(
                f"unknown model '{model_name}': to create it with this upload, give the team that will own it"
            )
        team = accounts.team_get(team_name)
        if team is None:
            raise NotFound(f"unknown team '{team_name}'")
        accounts.require_team(user, team, token, "model.create")
    return model, team


def _upload_ensemble(user, token, model_name: str, config, team_name: str, description: str):
    """An ensemble's config.pbtxt as a new version of ``model_name`` (created
    for ``team_name`` when new, as :func:`upload` creates one)."""
    model, team = _upload_target(user, token, model_name, team_name)
    try:
        with transaction.atomic():
            if model is None:
                model_services.validate_model_name(name=model_name)
                ensembles.check_model(None, model_name, config)
                model = model_services.model_get_or_create(
                    name=model_name, team=team, actor=user, description=description
                )
            return ensembles.version_create(
                model, config, actor=user, source="upload: config.pbtxt", action="version.upload"
            )
    except ensembles.EnsembleRefused as exc:
        raise (Conflict if exc.conflict else RegistryError)(str(exc)) from None
