"""What people do to a model's versions: retire, restore, delete; and what
forbids it (a READY ensemble running the version, a label on it, a traffic
split sending requests to a label on it). The state changes themselves are
the state machine's (:mod:`models_store.registry.services.states`).

A version comes in through ``models_store/intake`` (an upload, a repository
import, an ensemble's config.pbtxt).
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from models_store import audit
from models_store.errors import Conflict
from models_store.registry import selectors, signature_guard
from models_store.registry.models import ModelVersion, RegisteredModel
from models_store.registry.services import routes, states


def ensemble_blockers(*, model: RegisteredModel, numbers=None, doing: str = "") -> list[str]:
    """Why versions of ``model`` (``numbers``; None: any version) may not be
    deleted, retired or unloaded now: one sentence per READY ensemble
    version of a loaded model that runs one (models_store/intake/ensembles.py);
    [] when none. ``doing``: what is refused, e.g. "delete it"."""
    users = selectors.ensemble_users(model.name, None if numbers is None else set(numbers))
    return [
        f"version {pinned} of model '{model.name}' is step {step} of ensemble '{ensemble}' (version {number}, "
        f"READY); to {doing or 'change it'}, delete, retire or unload the ensemble first"
        for ensemble, number, step, pinned in users
    ]


def refuse_if_ensembles_use(*, model: RegisteredModel, numbers=None, doing: str) -> None:
    """Raise Conflict, naming the ensembles, when :func:`ensemble_blockers` finds any."""
    blockers = ensemble_blockers(model=model, numbers=numbers, doing=doing)
    if blockers:
        raise Conflict(" ".join(blockers))


@transaction.atomic
def version_retire(*, version: ModelVersion, actor, force: bool = False) -> ModelVersion:
    """Stop serving a READY version (state UNAVAILABLE); it can be restored.
    Raises Conflict when it is not READY, a version label points at it, or
    a READY ensemble runs it (naming the ensemble); SignatureConflict when
    the default route would then serve a version that breaks its callers
    (unless ``force``)."""
    version = ModelVersion.objects.select_for_update().select_related("model").get(pk=version.pk)
    states.check(version=version, change="retire")
    refuse_if_ensembles_use(model=version.model, numbers=[version.number], doing="retire it")
    labels = sorted(version.labels.values_list("name", flat=True))
    if labels:
        raise Conflict(
            f"version label(s) {', '.join(labels)} point at version {version.number}; move or delete them first"
        )
    forced = _guard_removal(version, "retiring", force)
    when = timezone.now().strftime("%Y-%m-%d %H:%M UTC")
    reason = f"retired by {audit.actor_name(actor)} on {when}"
    return states.transition(version=version, change="retire", actor=actor, reason=reason, detail=forced)


def _guard_removal(version: ModelVersion, doing: str, force: bool) -> dict:
    """The signature guard for the default route once ``version`` is gone."""
    return signature_guard.guard_default_route(
        version.model, what=f"{doing} version {version.number}", force=force, without=version.number
    )


@transaction.atomic
def version_restore(*, version: ModelVersion, actor) -> ModelVersion:
    """Serve a retired version again (UNAVAILABLE -> READY).
    Raises Conflict for a version that is not retired."""
    return states.transition(version=version, change="restore", actor=actor)


@transaction.atomic
def version_delete(*, version: ModelVersion, actor=None, force: bool = False) -> None:
    """Delete a version row (and the labels pointing at it); its artifact
    directory is removed after commit unless another version still uses it.
    The number is not reused. Raises Conflict, naming the ensemble, while
    a READY ensemble runs it, and, naming the split, while the
    model's traffic split sends requests to a label on it; a label on it
    that the split gives weight 0 leaves the split (audited ``traffic.set``),
    so that a split never names a label that does not exist. Raises
    SignatureConflict when the default route would then serve a version
    that breaks its callers (unless ``force``)."""
    model = RegisteredModel.objects.select_for_update().get(pk=version.model_id)
    refuse_if_ensembles_use(model=model, numbers=[version.number], doing="delete it")
    forced = _guard_removal(version, "deleting", force)
    labels = sorted(version.labels.values_list("name", flat=True))
    routes.release_from_split(model=model, labels=labels, actor=actor, what=f"version {version.number}")
    states.transition(version=version, change=states.DELETE, actor=actor, detail=forced)


def version_promote(*, version: ModelVersion, actor, force: bool = False) -> ModelVersion:
    """Release a held version to the version policy (:func:`states.promote`)."""
    return states.promote(version=version, actor=actor, force=force)
