"""The version state machine: the one module that writes a model version's ``state``.

::

    upload ──> UPLOADED ──validate──> VALIDATING ──ready──> READY ──retire──> UNAVAILABLE
                  ^                       │    └──fail──> FAILED     <──restore──
                  └─────────hold──────────┘   (a dependency failed: validated again later;
                  └──── hold_stale (the reaper: left UPLOADED or VALIDATING too long)
    repository import, ensemble ──> READY or FAILED (checked before the row exists)
    any state ──delete──> gone

    READY, held ──promote──> READY (a person, with force when it still breaks callers)

A version that becomes READY (validated, imported, restored) whose signature
would break the callers of the model's default route if the version policy
chose it (``latest``, ``all``: it is the highest) is **held**: READY, not
chosen by the policy, ``reason`` naming the differences, audited and
announced as ``version.held``, until :func:`promote` (a version label or a
traffic split may route to it meanwhile: a canary).

A version is created by :func:`version_create` (in UPLOADED, or READY/FAILED
when it was checked before), changes by :func:`transition` (one named change
of :data:`TRANSITIONS`), and leaves by ``transition(change="delete")``. Each
of them, in one transaction: writes the row, records the audit event, emits
the team's webhook event and bumps the change stamp (so that every server
process sees the change before the call answers). The reaper's
:func:`hold_stale` is the one bulk write. ``tests/models_store/test_layout.py``
checks that no other module writes ``state`` (nor ``held``).

Who drives the changes: validation (``models_store/intake/validating.py``:
validate, ready, fail, hold), the registry's services (retire, restore,
delete: ``versions.py``; delete also ``models.py``), the upkeep timer (the reaper).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from logging import getLogger

from django.db import transaction
from django.utils import timezone

from models_store import audit, storage
from models_store.errors import Conflict, DuplicateVersion, SignatureConflict
from models_store.registry import selectors, signature_guard
from models_store.registry.models import PLATFORM_ONNX, ModelVersion, RegisteredModel
from models_store.stamp import bump_stamp
from models_store.webhooks import services as webhooks

logger = getLogger(__name__)

State = ModelVersion.State
#: :func:`transition`'s change that removes the version (its row; its artifact after commit).
DELETE = "delete"


@dataclass(frozen=True)
class Transition:
    """One change of a version's state: from one of ``sources`` to
    ``target``; ``audit``: the audit action it records ("" : none);
    ``event``: whether it emits the webhook event named like its audit
    action; ``refusal``: the start of the Conflict raised for a version in
    another state ("" : the change is skipped, a concurrent change won)."""

    sources: frozenset[str]
    target: str
    audit: str = ""
    event: bool = False
    refusal: str = ""


TRANSITIONS: dict[str, Transition] = {
    "validate": Transition(frozenset({State.UPLOADED, State.VALIDATING}), State.VALIDATING),
    "ready": Transition(frozenset({State.VALIDATING}), State.READY, "version.ready", event=True),
    "fail": Transition(frozenset({State.VALIDATING}), State.FAILED, "version.failed", event=True),
    "hold": Transition(frozenset({State.VALIDATING}), State.UPLOADED),
    "retire": Transition(
        frozenset({State.READY}), State.UNAVAILABLE, "version.retire", refusal="only a READY version can be retired"
    ),
    "restore": Transition(
        frozenset({State.UNAVAILABLE}), State.READY, "version.restore", refusal="only a retired version can be restored"
    ),
}


#: The ``reason`` of a held version ({}: the differences).
HELD = (
    "held: its signature would break the callers of the default route ({}); "
    "promote it (with force) or point a version label at it"
)


def _hold_reason(model: RegisteredModel, number: int, inputs: list, outputs: list, actor) -> str:
    """Why version ``number`` of ``model`` (locked), with this signature and
    about to be saved READY, is held: the version policy choosing it would
    break the default route's callers ("" : it is not held). A hold is
    recorded and announced as ``version.held``."""
    differences = signature_guard.breaks_default_route(model, number=number, inputs=inputs, outputs=outputs)
    if not differences:
        return ""
    reason = HELD.format("; ".join(differences))
    audit.record(actor, "version.held", model, number, differences=differences)
    webhooks.model_event(
        model=model, event="version.held", version=number, state=State.READY, reason=reason, differences=differences
    )
    return reason


def _announce(version: ModelVersion) -> None:
    """The webhook event of a version that became READY or FAILED (``version.ready``, ``version.failed``)."""
    event = "version.ready" if version.state == State.READY else "version.failed"
    webhooks.model_event(
        model=version.model, event=event, version=version.number, state=version.state, reason=version.reason,
        sha256=version.sha256, inputs=version.inputs, outputs=version.outputs,
    )  # fmt: skip


def refuse_duplicate(*, model: RegisteredModel, sha256: str) -> None:
    """Raise DuplicateVersion when ``model`` already has a version with these bytes (``sha256``, hex)."""
    existing = selectors.version_by_sha256(model, sha256)
    if existing is not None:
        raise DuplicateVersion(
            f"model '{model.name}' already has these bytes (sha256 {sha256[:12]}…) as version "
            f"{existing.number} ({existing.state})"
        )


@transaction.atomic
def version_create(
    *,
    model: RegisteredModel,
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
    platform: str = PLATFORM_ONNX,
    announce: bool = False,
) -> ModelVersion:
    """Add a version of ``model`` in ``state``: UPLOADED (to be validated),
    or READY / FAILED when it was checked before (a repository import, an
    ensemble). Its number is ``preferred_number`` when that is above every
    number the model has used, else the next number (never reused). The
    audit event ``action`` is recorded with ``uploaded_by`` as the actor;
    ``announce``: also emit the webhook event of its state (an ensemble
    uploaded READY announces what a validated upload does).

    Raises DuplicateVersion when the model already has a version with these
    bytes, ValueError for another ``state``.
    """
    if state not in (State.UPLOADED, State.READY, State.FAILED):
        raise ValueError(f"a version is created UPLOADED, READY or FAILED, not {state}")
    locked = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    refuse_duplicate(model=locked, sha256=sha256)
    number = locked.last_version_number + 1
    if preferred_number is not None and preferred_number > locked.last_version_number:
        number = preferred_number
    locked.last_version_number = number
    locked.save(update_fields=["last_version_number", "updated_at"])
    audit.record(uploaded_by, action, locked, number, sha256=sha256, size=size, state=state, source=source)
    held = _hold_reason(locked, number, inputs or [], outputs or [], uploaded_by) if state == State.READY else ""
    version = ModelVersion.objects.create(
        model=locked, number=number, artifact=artifact, sha256=sha256, size=size, platform=platform, state=state,
        inputs=inputs or [], outputs=outputs or [], properties=properties or {}, reason=held or reason, log=log or [],
        source=source, uploaded_by=uploaded_by, held=bool(held),
    )  # fmt: skip
    if announce and state != State.UPLOADED:
        _announce(version)
    bump_stamp(changed=[locked.name])
    return version


def check(*, version: ModelVersion, change: str) -> None:
    """Raise Conflict when people may not ask for ``change`` (retire,
    restore) of ``version`` in its current state, e.g. "only a READY version
    can be retired; version 3 is FAILED"."""
    step = TRANSITIONS[change]
    if step.refusal and version.state not in step.sources:
        raise Conflict(f"{step.refusal}; version {version.number} is {version.state}")


@transaction.atomic
def transition(
    *,
    version: ModelVersion,
    change: str,
    actor=None,
    reason: str = "",
    log: list[str] | None = None,
    note: str = "",
    signature: dict | None = None,
    detail: dict | None = None,
) -> ModelVersion | None:
    """Make ``change`` (a key of :data:`TRANSITIONS`, or :data:`DELETE`) to
    ``version``, locked and read again first: set its state and ``reason``
    (and its ``log`` when given; ``note``: a line added to its log;
    ``signature``: ``inputs``, ``outputs``, ``properties`` found by
    validation), record the audit event (by ``actor``; None: the system),
    emit the webhook event, bump the change stamp; ``detail``: more of the
    audit entry (a forced signature guard's). A version becoming READY is
    held when it would break the default route's callers. Returns the version (None
    when it was deleted meanwhile). A version in a state the change does not
    start from raises Conflict for the changes people ask for (retire,
    restore), and is returned unchanged for the others (a concurrent change won).
    """
    if change != DELETE and TRANSITIONS[change].target == State.READY:
        # The model first (as a delete does), so that two versions becoming READY are compared in turn.
        RegisteredModel.objects.select_for_update().filter(pk=version.model_id).first()
    locked = ModelVersion.objects.select_for_update().select_related("model").filter(pk=version.pk).first()
    if locked is None:
        return None
    if change == DELETE:
        _delete(locked, actor, detail or {})
        return locked
    step = TRANSITIONS[change]
    if locked.state not in step.sources:
        check(version=locked, change=change)  # raises for the changes people ask for
        return locked
    locked.state, locked.reason = step.target, reason
    fields = ["state", "reason", "updated_at"]
    if log is not None or note:
        locked.log = [*(locked.log if log is None else log), *([note] if note else [])]
        fields.append("log")
    for key, value in (signature or {}).items():
        setattr(locked, key, value)
        fields.append(key)
    if step.audit:
        extra = {"reason": reason} if step.event else {}
        audit.record(actor, step.audit, locked.model, locked.number, **extra, **(detail or {}))
    held = ""
    if step.target == State.READY:
        held = _hold_reason(locked.model, locked.number, locked.inputs, locked.outputs, actor)
    locked.held, locked.reason = bool(held), held or locked.reason
    locked.save(update_fields=[*fields, "held"])
    if step.event:
        _announce(locked)
    bump_stamp(changed=[locked.model.name])
    return locked


def _delete(version: ModelVersion, actor, detail: dict) -> None:
    """Remove the version's row (and the labels on it) and, after commit, its
    artifact unless another version uses it; audited ``version.delete`` (with ``detail``)."""
    artifact = version.artifact
    labels = sorted(version.labels.values_list("name", flat=True))
    audit.record(actor, "version.delete", version.model, version.number, sha256=version.sha256, labels=labels, **detail)
    version.delete()
    bump_stamp(changed=[version.model.name])
    if artifact and not selectors.artifact_in_use(artifact):  # an ensemble's has none
        transaction.on_commit(lambda: storage.remove_artifact(artifact))


@transaction.atomic
def promote(*, version: ModelVersion, actor, force: bool = False) -> ModelVersion:
    """Release a held version: the version policy may choose it (under
    ``latest``, it becomes the default route). Compared with what the default
    route serves now: raises SignatureConflict while it would still break
    those callers unless ``force`` (audited ``version.promote``, with
    ``forced`` and the differences), Conflict for a version that is not held."""
    model = RegisteredModel.objects.select_for_update().get(pk=version.model_id)
    locked = ModelVersion.objects.select_for_update().get(pk=version.pk)
    if locked.state != State.READY or not locked.held:
        held = " (not held)" if locked.state == State.READY else ""
        raise Conflict(f"only a held version can be promoted; version {locked.number} is {locked.state}{held}")
    differences = signature_guard.breaks_default_route(
        model, number=locked.number, inputs=locked.inputs, outputs=locked.outputs
    )
    if differences and not force:
        raise SignatureConflict(f"promoting version {locked.number} to the default route", differences)
    forced = {"forced": True, "differences": differences} if differences else {}
    locked.held, locked.reason = False, ""
    locked.log = [*locked.log, f"promoted by {audit.actor_name(actor)}" + (" (forced)" if differences else "")]
    locked.save(update_fields=["held", "reason", "log", "updated_at"])
    audit.record(actor, "version.promote", model, locked.number, **forced)
    bump_stamp(changed=[model.name])
    return locked


def hold_stale(*, deadline_seconds: float) -> list[int]:
    """The reaper: versions left UPLOADED or VALIDATING longer than
    ``deadline_seconds`` (a worker killed mid-validation, a task lost with
    the broker, a process that ended before its retry) are UPLOADED again,
    with a line in their log; returns their ids for the caller to queue (or
    validate). A version is taken by one reaper only (a conditional update)."""
    now = timezone.now()
    cutoff = now - timedelta(seconds=deadline_seconds)
    stale = ModelVersion.objects.filter(state__in=(State.UPLOADED, State.VALIDATING), updated_at__lt=cutoff)
    taken = []
    for pk, state, log in stale.values_list("pk", "state", "log"):
        line = f"re-queued: {state} for more than {deadline_seconds:g} s (VALIDATION_DEADLINE_SECONDS)"
        with transaction.atomic():
            changed = ModelVersion.objects.filter(pk=pk, state=state, updated_at__lt=cutoff).update(
                state=State.UPLOADED, updated_at=now, log=[*log, line]
            )
            if changed:
                bump_stamp()
                taken.append(pk)
    if taken:
        logger.warning(
            "re-queued the validation of %d version(s) left UPLOADED or VALIDATING: ids %s", len(taken), taken
        )
    return taken
