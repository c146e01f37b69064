"""Writes of a model's routes: its version labels (``stable`` -> version 3)
and its traffic split (the requests that name no version, shared between
labels by weight), with canary promote and rollback.

Each write runs in a transaction on the locked model, is guarded by the
signature guard (:mod:`models_store.registry.signature_guard`: a route
keeps the signature its callers use, unless ``force``), records its audit
event, emits the team's webhook events (``label.moved``,
``traffic.changed``) and bumps the change stamp. A split never names a
label that does not exist: a label leaving takes its weight-0 entry out of
the split (:func:`release_from_split`), and one the split sends requests to
may not leave.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction

from models_store import audit
from models_store.errors import Conflict, RegistryError
from models_store.identifiers import check_whole, label_validator
from models_store.registry import selectors, signature_guard
from models_store.registry.models import ModelVersion, RegisteredModel, VersionLabel
from models_store.stamp import bump_stamp
from models_store.webhooks import services as webhooks

State = ModelVersion.State
STABLE, CANARY = "stable", "canary"


def _label_moved(model: RegisteredModel, label: str, previous, version, actor, forced: bool = False) -> None:
    """The ``label.moved`` event: ``version`` None when the label was removed, ``previous`` None when it is new."""
    if previous != version:
        webhooks.model_event(
            model=model, event="label.moved", label=label, version=version, previous_version=previous, forced=forced,
            actor=audit.actor_name(actor),
        )  # fmt: skip


def _traffic_versions(model: RegisteredModel, traffic: dict[str, int]) -> dict[str, int]:
    labels = selectors.label_numbers(model)
    return {label: labels[label] for label in traffic if label in labels}


def _traffic_changed(model: RegisteredModel, action: str, before: dict, actor, forced: bool = False) -> None:
    """The ``traffic.changed`` event (``action``: set, promote, rollback, or dropped: labels left the split)."""
    traffic = model.traffic or {}
    if traffic != before:
        webhooks.model_event(
            model=model, event="traffic.changed", action=action, traffic=traffic, before=before,
            versions=_traffic_versions(model, traffic), forced=forced, actor=audit.actor_name(actor),
        )  # fmt: skip


# -- version labels -----------------------------------------------------------
@transaction.atomic
def label_set(*, model: RegisteredModel, name: str, number: int, actor=None, force: bool = False) -> VersionLabel:
    """Point label ``name`` at version ``number``; the version must be READY.

    Raises RegistryError for a malformed name, Conflict for a missing
    version or one that is not READY, SignatureConflict when the label
    moves to a version whose signature breaks its callers (unless ``force``).
    """
    try:
        check_whole(label_validator, name)
    except DjangoValidationError as exc:
        raise RegistryError(exc.messages[0]) from None
    model = RegisteredModel.objects.select_for_update().get(pk=model.pk)  # against a concurrent version delete
    version = selectors.version_get(model, number)
    if version is None:
        raise Conflict(f"model '{model.name}' has no version {number}")
    if version.state != State.READY:
        raise Conflict(
            f"label '{name}' may only point at a READY version; version {number} of '{model.name}' is {version.state}"
        )
    current = VersionLabel.objects.filter(model=model, name=name).select_related("version").first()
    forced = {}
    if current is not None:
        forced = signature_guard.guard(
            model, what=f"moving label '{name}' from version {current.version.number} to {number}",
            route=f"label '{name}'", before=[current.version], after=[version], force=force,
        )  # fmt: skip
    label, _ = VersionLabel.objects.update_or_create(model=model, name=name, defaults={"version": version})
    audit.record(actor, "label.set", model, number, label=name, **forced)
    _label_moved(model, name, current.version.number if current else None, number, actor, bool(forced))
    bump_stamp(changed=[model.name])
    return label


@transaction.atomic
def label_delete(*, model: RegisteredModel, name: str, actor=None) -> bool:
    """Remove a label; False when the model has no such label. Raises
    Conflict, naming the split, while the traffic split sends requests to
    it; a label the split gives weight 0 leaves the split (audited
    ``traffic.set``)."""
    model = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    label = VersionLabel.objects.filter(model=model, name=name).first()
    if label is None:
        return False
    release_from_split(model=model, labels=[name], actor=actor)
    previous = label.version.number
    label.delete()
    audit.record(actor, "label.delete", model, label=name)
    _label_moved(model, name, previous, None, actor)
    bump_stamp(changed=[model.name])
    return True


# -- the traffic split ----------------------------------------------------------
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
    labels = selectors.label_versions(model)
    for label in sorted(weights):
        version = labels.get(label)
        if version is None:
            known = ", ".join(sorted(labels)) or "none"
            raise Conflict(f"model '{model.name}' has no version label '{label}' (labels: {known})")
        if weights[label] > 0 and version.state != State.READY:
            raise Conflict(f"label '{label}' points at version {version.number}, which is {version.state}, not READY")
    return dict(sorted(weights.items()))


def split_blockers(*, model: RegisteredModel, labels, what: str = "") -> list[str]:
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


def release_from_split(*, model: RegisteredModel, labels, actor, what: str = "") -> None:
    """Before ``labels`` of the (locked) ``model`` go: Conflict when its
    split sends requests to one (:func:`split_blockers`); the ones it gives
    weight 0 are dropped from the split, audited as ``traffic.set``. A split
    thus never names a label that does not exist: a label created later
    under the same name gets no request until a split names it again."""
    blockers = split_blockers(model=model, labels=labels, what=what)
    if blockers:
        raise Conflict(" ".join(blockers))
    before = model.traffic or {}
    dropped = sorted(set(labels) & set(before))
    if not dropped:
        return
    model.traffic = {label: weight for label, weight in before.items() if label not in dropped}
    model.save(update_fields=["traffic", "updated_at"])
    audit.record(
        actor, "traffic.set", model, traffic=model.traffic, before=before,
        versions=_traffic_versions(model, model.traffic), dropped=dropped,
    )  # fmt: skip
    _traffic_changed(model, "dropped", before, actor)
    bump_stamp(changed=[model.name])


@transaction.atomic
def traffic_set(*, model: RegisteredModel, weights: dict[str, int], actor=None, force: bool = False) -> RegisteredModel:
    """Split the requests that name no version between version labels by
    weight (e.g. ``{"stable": 90, "canary": 10}``; ``{}`` clears the split).
    The versions the split sends requests to serve, whatever the version
    policy says. Raises RegistryError (a weight out of range), Conflict
    (weights not summing to 100, an unknown label, a label on a version
    that is not READY), SignatureConflict when the default route would
    serve a version whose signature breaks its callers (unless ``force``)."""
    locked = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    traffic = _check_traffic(locked, dict(weights))
    forced = signature_guard.guard_default_route(locked, what="this traffic split", force=force, traffic=traffic)
    before = locked.traffic or {}
    locked.traffic = traffic
    locked.save(update_fields=["traffic", "updated_at"])
    audit.record(
        actor, "traffic.set", locked, traffic=traffic, before=before, versions=_traffic_versions(locked, traffic),
        **forced,
    )  # fmt: skip
    _traffic_changed(locked, "set", before, actor, bool(forced))
    bump_stamp(changed=[locked.name])
    return locked


def _ready_label(model: RegisteredModel, labels: dict, name: str, purpose: str) -> ModelVersion:
    """The READY version label ``name`` points at; raises Conflict otherwise."""
    version = labels.get(name)
    if version is None:
        raise Conflict(f"model '{model.name}' has no version label '{name}' {purpose}")
    if version.state != State.READY:
        raise Conflict(f"label '{name}' points at version {version.number}, which is {version.state}, not READY")
    return version


@transaction.atomic
def traffic_promote(*, model: RegisteredModel, actor=None, force: bool = False) -> RegisteredModel:
    """Promote the canary: label ``stable`` moves to the version of label
    ``canary``, and the split sends every request to it (``stable`` 100,
    ``canary`` 0). Raises Conflict without a ``canary`` label on a READY
    version, SignatureConflict when ``stable``'s callers would break
    (unless ``force``)."""
    locked = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    labels = selectors.label_versions(locked)
    canary = _ready_label(locked, labels, CANARY, "to promote")
    stable = labels.get(STABLE)
    forced = {}
    if stable is not None:
        forced = signature_guard.guard(
            locked, what=f"promoting: moving label '{STABLE}' from version {stable.number} to {canary.number}",
            route=f"label '{STABLE}'", before=[stable], after=[canary], force=force,
        )  # fmt: skip
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
    bump_stamp(changed=[locked.name])
    return locked


@transaction.atomic
def traffic_rollback(*, model: RegisteredModel, actor=None) -> RegisteredModel:
    """Roll the canary back: every request that names no version goes to
    label ``stable`` again (``stable`` 100, ``canary`` 0; the labels stay).
    Raises Conflict without a ``stable`` label on a READY version."""
    locked = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    labels = selectors.label_versions(locked)
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
    bump_stamp(changed=[locked.name])
    return locked
