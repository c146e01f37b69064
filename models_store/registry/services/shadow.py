"""Writes of a model's shadow traffic: the version that gets a copy of a
share of the model's requests (its answers compared with the live ones and
discarded by the serving side: inference/shadow/traffic.py).

Each write runs in a transaction on the locked model, records its audit
event (``shadow.set``, ``shadow.clear``) and bumps the change stamp, so that
every server process follows it within its registry poll.
"""

from __future__ import annotations

import math

from django.db import transaction

from inference.ensembles.plan import PLATFORM as ENSEMBLE
from models_store import audit
from models_store.errors import Conflict, RegistryError
from models_store.registry import selectors
from models_store.registry.models import ModelVersion, RegisteredModel
from models_store.stamp import bump_stamp

State = ModelVersion.State


def _shadow(model: RegisteredModel) -> dict | None:
    """The model's shadow traffic as the audit log records it."""
    if model.shadow_version_id is None:
        return None
    number = ModelVersion.objects.filter(pk=model.shadow_version_id).values_list("number", flat=True).first()
    return {"version": number, "percent": model.shadow_percent}


def _check_percent(percent) -> float:
    """``percent`` as stored: a number from 0 to 100; RegistryError otherwise."""
    if type(percent) not in (int, float) or math.isnan(percent) or not 0 <= percent <= 100:
        raise RegistryError(f"the shadow percent must be a number from 0 to 100, not {percent!r}")
    return float(percent)


@transaction.atomic
def shadow_set(*, model: RegisteredModel, number: int, percent: float, actor=None) -> RegisteredModel:
    """Send a copy of ``percent`` percent (0..100) of ``model``'s requests
    to its version ``number``, after their live answers. Raises
    RegistryError (a percent out of range), Conflict (an ensemble; no such
    version; a version that is not READY; the version the default route
    serves now: requests that name no version get it already)."""
    percent = _check_percent(percent)
    locked = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    if locked.platform == ENSEMBLE:
        raise Conflict(f"'{locked.name}' is an ensemble: shadow traffic goes to a model's version")
    version = selectors.version_get(locked, number)
    if version is None:
        raise Conflict(f"model '{locked.name}' has no version {number}")
    if version.state != State.READY:
        raise Conflict(
            f"shadow traffic may only go to a READY version; version {number} of '{locked.name}' is {version.state}"
        )
    state = selectors.serving(locked)
    default_route = {state.default, *(routed for _label, routed, _weight in state.routes)}
    if number in default_route:
        raise Conflict(
            f"version {number} of '{locked.name}' is what requests that name no version get now (the default "
            "route): shadow traffic compares another version with it"
        )
    before = _shadow(locked)
    locked.shadow_version = version
    locked.shadow_percent = percent
    locked.save(update_fields=["shadow_version", "shadow_percent", "updated_at"])
    audit.record(actor, "shadow.set", locked, number, percent=percent, before=before)
    bump_stamp(changed=[locked.name])
    return locked


@transaction.atomic
def shadow_clear(*, model: RegisteredModel, actor=None) -> bool:
    """End ``model``'s shadow traffic; False when it had none."""
    locked = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    before = _shadow(locked)
    if before is None:
        return False
    locked.shadow_version = None
    locked.shadow_percent = 0.0
    locked.save(update_fields=["shadow_version", "shadow_percent", "updated_at"])
    audit.record(actor, "shadow.clear", locked, before["version"], before=before)
    bump_stamp(changed=[locked.name])
    return True
