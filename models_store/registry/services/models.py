"""Writes of registered models: create, configure (Triton's config, version
policy, instance groups, payload logging), load and unload, delete.

Each write runs in a transaction, bumps the change stamp in it (so that
every server process sees the change) and, for changes people make,
records an audit event (``actor`` None: the system). Permission checks
happen before a service is called (the actions: ``registry/actions.py``);
services trust their caller.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction

from inference.serving import instance_groups
from inference.serving.state import served_versions
from models_store import audit
from models_store.config.signatures import check_against_versions
from models_store.config.triton import ENSEMBLE, ConfigError, TritonConfig, parse_config_json, same_config
from models_store.errors import Conflict, RegistryError, SignatureConflict
from models_store.identifiers import check_whole, model_name_validator
from models_store.registry import selectors, signature_guard
from models_store.registry.models import RegisteredModel, VersionPolicy
from models_store.registry.services import routes, states
from models_store.registry.services.versions import ensemble_blockers, refuse_if_ensembles_use
from models_store.rollouts import selectors as rollouts
from models_store.stamp import bump_stamp
from models_store.webhooks import services as webhooks

State = states.State
#: Largest tensor bytes a logged pair may hold (a record's size cap).
MAX_PAYLOAD_LOG_BYTES = 16 * 1024 * 1024


def validate_model_name(*, name: str) -> None:
    """Raise RegistryError unless ``name`` is a well-formed model name."""
    try:
        check_whole(model_name_validator, name)
    except DjangoValidationError as exc:
        raise RegistryError(exc.messages[0]) from None


def refuse_other_team(*, model: RegisteredModel, team) -> None:
    """Raise RegistryError when ``model`` (found by a name a caller wants to
    create for ``team``) belongs to another team, or to the operators."""
    if model.team_id != team.pk:
        owner = model.team.name if model.team else "the operators"
        raise RegistryError(f"a model named '{model.name}' already exists and belongs to {owner}, not team {team.name}")


def model_lock(*, model: RegisteredModel) -> RegisteredModel:
    """The model's row read again and locked until the caller's transaction ends."""
    return RegisteredModel.objects.select_for_update().get(pk=model.pk)


# -- creation -------------------------------------------------------------------
@transaction.atomic
def model_create(*, name: str, team, actor, description: str = "") -> RegisteredModel:
    """Register an empty model owned by ``team``. Raises RegistryError for a
    malformed name, Conflict for a taken one."""
    validate_model_name(name=name)
    try:
        with transaction.atomic():
            model = RegisteredModel.objects.create(name=name, team=team, description=description, created_by=actor)
    except IntegrityError:
        raise Conflict(f"a model named '{name}' already exists") from None
    audit.record(actor, "model.create", model, team=team.name)
    bump_stamp(changed=[model.name])
    return model


def model_get_or_create(*, name: str, team, actor, description: str = "") -> RegisteredModel:
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
            bump_stamp(changed=[model.name])
            return model
        refuse_other_team(model=model, team=team)
        return model
    raise RegistryError(f"a model named '{name}' already exists")


@transaction.atomic
def model_upsert(
    *, name: str, config: TritonConfig | None = None, team=None, output_labels: dict | None = None
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
        _set_config_fields(model, config, labels)
        changed = True
    if team is not None and model.team_id is None:
        model.team = team
        changed = True
    if changed:
        model.save()
        bump_stamp(changed=[model.name])
    return model


@transaction.atomic
def model_update(*, model: RegisteredModel, actor, description: str) -> RegisteredModel:
    """Change a model's description."""
    model.description = description
    model.save(update_fields=["description", "updated_at"])
    audit.record(actor, "model.update", model, description=description)
    bump_stamp(changed=[model.name])
    return model


# -- configuration ----------------------------------------------------------------
def _set_config_fields(model: RegisteredModel, config: TritonConfig, output_labels: dict) -> None:
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
    *, model: RegisteredModel, config: TritonConfig, actor=None, source: str = "repository load", validating=False
) -> RegisteredModel:
    """Replace ``model``'s configuration by ``config``, as Triton's load with
    a config does ("used for loading the model instead of the one in the
    model directory"): what it leaves out takes its default (version policy
    latest 1, no dynamic batching, one instance, no parameters, no output
    labels); inputs and outputs are completed from the versions'
    signatures. Audited as ``model.config`` (with ``source``). Raises
    ConfigError when the config names another model, is an ensemble's (or
    the model is an ensemble: its versions carry its configuration,
    models_store/intake/ensembles.py), or does not fit the
    validated versions (:func:`check_against_versions`; ``validating``: a
    new version will be validated with it), or its version policy would
    serve nothing, or would make the default route serve a version whose
    signature breaks its callers (the signature guard; set the policy with
    ``force`` through the management API to do that)."""
    locked = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    if config.ensemble or locked.platform == ENSEMBLE:
        raise ConfigError(
            "an ensemble's configuration comes with its versions: upload its config.pbtxt alone (no model file) "
            "as a new version of an ensemble model"
        )
    if config.name and config.name != locked.name:
        raise ConfigError(f"the config names the model {config.name!r}, not {locked.name!r}")
    check_against_versions(locked, config, selectors.validated_versions(locked), validating)
    try:
        check_version_policy(
            model=locked, policy=config.policy, latest=config.latest_versions,
            specific=sorted(set(config.specific_versions)),
        )  # fmt: skip
    except RegistryError as exc:
        raise ConfigError(str(exc)) from None
    policy = (config.policy, config.latest_versions, sorted(set(config.specific_versions)))
    try:
        signature_guard.guard_default_route(locked, what="its version policy", force=False, policy=policy)
    except SignatureConflict as exc:
        raise ConfigError(
            f"its version policy would break the default route's callers: {'; '.join(exc.differences)}"
        ) from None
    kept = {t.name for t in config.outputs if t.label_filename}
    _set_config_fields(locked, config, {k: v for k, v in (locked.output_labels or {}).items() if k in kept})
    locked.save()
    audit.record(actor, "model.config", locked, source=source, config=config.raw)
    bump_stamp(changed=[locked.name])
    return locked


def model_load_config(*, model: RegisteredModel, text: str, actor=None) -> RegisteredModel:
    """:func:`model_set_config` with Triton's JSON form of a configuration,
    as a repository load's ``config`` parameter carries it. Raises ConfigError."""
    return model_set_config(model=model, config=parse_config_json(text, source="config"), actor=actor)


@transaction.atomic
def model_set_ensemble_config(*, model: RegisteredModel, config: TritonConfig, actor=None, source: str) -> None:
    """Make ``model`` (locked by the caller) an ensemble with ``config`` (its
    platform becomes ``ensemble``); audited as ``model.config`` when it
    changes (an ensemble's configuration comes with each of its versions)."""
    if model.platform != ENSEMBLE or model.config != config.raw:
        _set_config_fields(model, config, {})
        model.platform = ENSEMBLE
        model.save()
        audit.record(actor, "model.config", model, source=source, config=config.raw)
        bump_stamp()


def check_version_policy(*, model: RegisteredModel, policy: str, latest: int, specific: list[int]) -> None:
    """Raise RegistryError unless the policy is well formed, and Conflict
    unless it lists existing versions and serves at least one READY version
    (a ``latest`` or ``all`` policy of a model without READY versions is
    accepted: it serves the first one to come)."""
    if policy not in VersionPolicy.values:
        raise RegistryError(f"unknown version policy '{policy}' (one of: {', '.join(VersionPolicy.values)})")
    if policy == VersionPolicy.LATEST and latest < 1:
        raise RegistryError("a latest policy serves at least 1 version")
    states_by_number = selectors.version_states(model)
    if policy == VersionPolicy.SPECIFIC:
        if not specific:
            raise Conflict("a specific policy lists at least one version number (give specific_versions)")
        missing = sorted(n for n in set(specific) if n not in states_by_number)
        if missing:
            raise Conflict(f"model '{model.name}' has no version {', '.join(map(str, missing))}")
    ready = [n for n, state in states_by_number.items() if state == State.READY]
    if not served_versions(policy, ready, latest, specific) and (ready or policy == VersionPolicy.SPECIFIC):
        listed = ", ".join(f"{n} ({states_by_number[n]})" for n in sorted(set(specific)))
        raise Conflict(
            f"this version policy would serve no version of '{model.name}': "
            + (f"it lists {listed}; " if policy == VersionPolicy.SPECIFIC else "")
            + f"READY versions: {', '.join(map(str, sorted(ready))) or 'none'}"
        )


@transaction.atomic
def model_set_policy(
    *, model: RegisteredModel, policy: str, latest: int = 1, specific=(), actor=None, force: bool = False
) -> RegisteredModel:
    """Set the version policy (``latest`` N, ``all``, ``specific`` numbers).

    Raises RegistryError for a malformed policy, Conflict for one that
    serves nothing (see :func:`check_version_policy`), SignatureConflict
    when the default route would serve a version that breaks its callers
    (unless ``force``).
    """
    model = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    specific = sorted({int(n) for n in specific})
    check_version_policy(model=model, policy=policy, latest=latest, specific=specific)
    forced = signature_guard.guard_default_route(
        model, what="this version policy", force=force, policy=(policy, latest, specific)
    )
    model.version_policy = policy
    model.latest_versions = latest if policy == VersionPolicy.LATEST else model.latest_versions
    model.specific_versions = specific if policy == VersionPolicy.SPECIFIC else []
    model.save(update_fields=["version_policy", "latest_versions", "specific_versions", "updated_at"])
    audit.record(actor, "model.policy", model, policy=policy, latest=latest, specific=specific, **forced)
    bump_stamp(changed=[model.name])
    return model


@transaction.atomic
def model_set_instance_group(*, model: RegisteredModel, groups: list[dict], actor=None) -> RegisteredModel:
    """Replace a model's instance groups (Triton's ``instance_group``): each
    ``{"kind": KIND_AUTO|KIND_GPU|KIND_CPU, "count": n >= 1, "gpus": [ints]}``
    (``gpus`` only for KIND_GPU; defaults and rules:
    :mod:`inference.serving.instance_groups`). Raises RegistryError for anything else,
    and for an ensemble (as Triton: its steps run on their own models' instances)."""
    try:
        clean = instance_groups.validate(groups)
    except instance_groups.InstanceGroupError as exc:
        raise RegistryError(str(exc)) from None
    locked = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    if locked.platform == ENSEMBLE and clean:
        raise RegistryError(
            f"'{locked.name}' is an ensemble: it has no instances of its own (each step runs on its model's "
            "instance groups); set them on the composing models"
        )
    locked.instance_group = clean
    locked.save(update_fields=["instance_group", "updated_at"])
    audit.record(actor, "model.instance_group", locked, instance_group=clean)
    bump_stamp(changed=[locked.name])
    return locked


@transaction.atomic
def model_set_payload_logging(*, model: RegisteredModel, rate: float, max_bytes: int, actor=None) -> RegisteredModel:
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
    bump_stamp(changed=[locked.name])
    return locked


# -- load, unload, delete ---------------------------------------------------------
@transaction.atomic
def model_set_loaded(
    *, model: RegisteredModel, loaded: bool, actor=None, unload_dependents: bool = False
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
        refuse_if_ensembles_use(model=locked, doing="unload it")
    if locked.loaded != loaded:
        locked.loaded = loaded
        locked.save(update_fields=["loaded", "updated_at"])
        audit.record(actor, "model.load" if loaded else "model.unload", locked)
        bump_stamp(changed=[locked.name])
    if not loaded and unload_dependents and locked.platform == ENSEMBLE:
        for name in selectors.ensemble_composing_models(locked):
            step = RegisteredModel.objects.select_for_update().filter(name=name, loaded=True).first()
            if step is not None and not ensemble_blockers(model=step):
                step.loaded = False
                step.save(update_fields=["loaded", "updated_at"])
                audit.record(actor, "model.unload", step, dependent_of=locked.name)
                bump_stamp()
    return locked


def model_delete_blockers(*, model: RegisteredModel) -> list[str]:
    """Why ``model`` may not be deleted now, one sentence each ([] when it
    may): a READY ensemble runs one of its versions (naming it), its traffic
    split sends requests to one of its labels (the version delete's rules,
    for every version), a rollout of it is running or paused, or it sends
    shadow traffic. The signature guard of the default route does not apply:
    once the model is gone no route of it serves."""
    blockers = ensemble_blockers(model=model, doing="delete the model")
    labels = model.labels.values_list("name", flat=True)
    blockers += routes.split_blockers(model=model, labels=labels)
    rollout = rollouts.active_rollout(model)
    if rollout is not None:
        blockers.append(
            f"a rollout of version {rollout.canary_version} of '{model.name}' is {rollout.status}; "
            "abort it (or let it end) first"
        )
    if model.shadow_version_id is not None:
        number = model.shadow_version.number
        blockers.append(f"'{model.name}' sends shadow traffic to version {number}; stop it first")
    return blockers


@transaction.atomic
def model_delete(*, model: RegisteredModel, actor=None) -> None:
    """Delete a model with its versions (each removed as a version delete
    removes it: :func:`states.transition` ``DELETE``, its artifact directory
    after commit), labels, traffic split and rollouts' history. Audited
    ``model.delete`` with ``actor``; a ``model.deleted`` webhook event.
    Raises Conflict (409) with every reason of :func:`model_delete_blockers`."""
    model = model_lock(model=model)
    blockers = model_delete_blockers(model=model)
    if blockers:
        raise Conflict(" ".join(blockers))
    for version in list(model.versions.all()):
        states.transition(version=version, change=states.DELETE, actor=actor)
    audit.record(actor, "model.delete", model, team=model.team.name if model.team else "")
    webhooks.model_event(model=model, event="model.deleted", actor=audit.actor_name(actor))
    model.delete()
    bump_stamp(changed=[model.name])
