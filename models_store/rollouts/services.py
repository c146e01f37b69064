"""Writes of progressive rollouts (docs/rollouts.md "Progressive rollouts"):
start one, judge its due steps (:func:`tick`), and what a person does to it
(pause, resume, promote now, abort). Each takes keyword arguments only.

A rollout drives the registry's own routes through its services
(:mod:`models_store.registry.services.routes`: the signature guard, the
audit log and the change stamp apply as to a person's change): version
label ``stable`` (the version callers use now), version label ``canary``
(the new version), and the traffic split between them. At each step's end
:mod:`models_store.rollouts.analysis` judges the canary: pass advances to
the next weight (at the last, promotes: ``stable`` moves to the canary's
version and the split ends), fail rolls back at once (``stable`` 100,
``canary`` 0), too few requests extends the step by one pause.

One process judges a step: the row is locked (``select_for_update``,
skipping a row another process holds) and claimed with a conditional
update of ``revision``, in the transaction of the change (SQLite has no row
locks; its write lock and the claim do it). A change of the labels or the
split by hand while a rollout runs pauses it at its next judgement
(:func:`_drift`): the person resumes it (the step's routes are set again
and the step starts over) or aborts it.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from models_store import audit
from models_store.errors import Conflict, Refused, RegistryError
from models_store.registry import selectors as registry
from models_store.registry.services import routes
from models_store.rollouts import analysis, selectors
from models_store.rollouts.models import Rollout, RolloutStatus
from models_store.webhooks import services as webhooks

Status = RolloutStatus
STABLE, CANARY = routes.STABLE, routes.CANARY
MAX_STEPS = 20
MAX_PAUSE_SECONDS = 7 * 86400


def _check_steps(steps) -> list[int]:
    """``steps`` as stored: whole percentages from 1 to 100 (RegistryError
    otherwise), at most :data:`MAX_STEPS`, increasing and ending at 100
    (Conflict otherwise, as a traffic split's weights that do not add up to 100)."""
    if not isinstance(steps, list | tuple) or not 0 < len(steps) <= MAX_STEPS:
        raise RegistryError(f"steps are a list of 1 to {MAX_STEPS} weights")
    if any(type(s) is not int or not 0 < s <= 100 for s in steps):
        raise RegistryError("each step is a whole percentage from 1 to 100")
    if any(b <= a for a, b in itertools.pairwise(steps)) or steps[-1] != 100:
        raise Conflict(f"steps must increase and end at 100, not {list(steps)}")
    return list(steps)


def _check_thresholds(pause_seconds: float, max_error_rate: float, max_p99_ratio: float, p99_tolerance_ms: float,
                      min_requests: int) -> None:  # fmt: skip
    if not 0.1 <= pause_seconds <= MAX_PAUSE_SECONDS:
        raise RegistryError(f"pause_seconds is from 0.1 to {MAX_PAUSE_SECONDS}")
    if not 0 <= max_error_rate <= 1:
        raise RegistryError("max_error_rate is a fraction from 0 to 1")
    if not 1 <= max_p99_ratio <= 1000 or not 0 <= p99_tolerance_ms <= 3_600_000:
        raise RegistryError("max_p99_ratio is from 1 to 1000, p99_tolerance_ms from 0 to 3600000")
    if not 1 <= min_requests <= 10_000_000:
        raise RegistryError("min_requests is from 1 to 10000000")


def _weights(rollout: Rollout) -> dict[str, int]:
    return {CANARY: rollout.weight, STABLE: 100 - rollout.weight}


def _event(rollout: Rollout, event: str, actor, **data) -> None:
    webhooks.model_event(
        model=rollout.model, event=event, rollout=rollout.pk, canary_version=rollout.canary_version,
        stable_version=rollout.stable_version, step=rollout.step, weight=rollout.weight, actor=audit.actor_name(actor),
        **data,
    )  # fmt: skip


def _begin_step(rollout: Rollout, now: datetime) -> None:
    """Start the current step now: its baseline, its judgement time."""
    minute = int(now.timestamp() // 60)
    seen = analysis.totals(rollout.model.name, (rollout.canary_version, rollout.stable_version), minute)
    rollout.baseline = {
        "minute": minute,
        "canary": seen[rollout.canary_version].as_json(),
        "stable": seen[rollout.stable_version].as_json(),
    }
    rollout.step_started_at = now
    rollout.judge_at = now + timedelta(seconds=rollout.pause_seconds + analysis.settle_seconds())


def rollout_start(*, model, canary_version: int, actor, steps=None, pause_seconds: float | None = None,
                  max_error_rate: float | None = None, max_p99_ratio: float | None = None,
                  p99_tolerance_ms: float | None = None, min_requests: int | None = None,
                  force: bool = False) -> Rollout:  # fmt: skip
    """Start rolling out version ``canary_version`` of ``model``: label
    ``stable`` stays on (or is set to) the version the default route serves,
    label ``canary`` is set to the new version, and the split gives it the
    first step's weight. None: the default (:mod:`models_store.rollouts.models`).
    Raises RegistryError (bad steps or thresholds), Conflict (another active
    rollout; no such version or not READY; the stable version itself;
    nothing serves; rollups off), SignatureConflict (the canary breaks the
    default route's callers, unless ``force``). Audited ``rollout.started``."""
    fields = {"steps": _check_steps(steps) if steps is not None else None, "pause_seconds": pause_seconds,
              "max_error_rate": max_error_rate, "max_p99_ratio": max_p99_ratio,
              "p99_tolerance_ms": p99_tolerance_ms, "min_requests": min_requests}  # fmt: skip
    rollout = Rollout(model=model, canary_version=canary_version, stable_version=0, force=force, started_by=actor)
    for name, value in fields.items():
        if value is not None:
            setattr(rollout, name, value)
    if steps is None:
        rollout.steps = list(rollout.steps) or [5, 25, 50, 100]
    _check_thresholds(rollout.pause_seconds, rollout.max_error_rate, rollout.max_p99_ratio,
                      rollout.p99_tolerance_ms, rollout.min_requests)  # fmt: skip
    if not settings.CHART_ROLLUPS:
        raise Conflict("rollouts judge the canary from the per-minute rollups, and CHART_ROLLUPS is off")
    version = registry.version_get(model, canary_version)
    if version is None:
        raise Conflict(f"model '{model.name}' has no version {canary_version}")
    if version.state != "READY":
        raise Conflict(f"version {canary_version} of '{model.name}' is {version.state}, not READY")
    labels = registry.label_numbers(model)
    stable = labels.get(STABLE) or registry.serving(model).default
    if stable is None:
        raise Conflict(f"nothing of '{model.name}' serves now: there is no stable version to roll out from")
    if stable == canary_version:
        raise Conflict(f"version {canary_version} is the stable version of '{model.name}' already")
    rollout.stable_version = stable
    with transaction.atomic():
        _refuse_second(model)
        try:
            with transaction.atomic():
                rollout.save()
        except IntegrityError:
            raise Conflict(f"model '{model.name}' has a rollout running already") from None
        if STABLE not in labels:
            routes.label_set(model=model, name=STABLE, number=stable, actor=actor)
        routes.label_set(model=model, name=CANARY, number=canary_version, actor=actor, force=force)
        routes.traffic_set(model=model, weights=_weights(rollout), actor=actor, force=force)
        _begin_step(rollout, timezone.now())
        rollout.save()
        audit.record(
            actor, "rollout.started", model, canary_version, rollout=rollout.pk, stable=stable, steps=rollout.steps,
            pause_seconds=rollout.pause_seconds, max_error_rate=rollout.max_error_rate,
            max_p99_ratio=rollout.max_p99_ratio, min_requests=rollout.min_requests, forced=force,
        )  # fmt: skip
        _event(rollout, "rollout.started", actor, steps=rollout.steps)
    return rollout


def _refuse_second(model) -> None:
    active = selectors.active_rollout(model)
    if active is not None:
        raise Conflict(
            f"model '{model.name}' has a rollout {active.status} already (rollout {active.pk}, version "
            f"{active.stable_version} -> {active.canary_version}); pause, promote or abort it first"
        )


# -- claiming a rollout ---------------------------------------------------------
def _claim(rollout: Rollout) -> bool:
    """Take ``rollout`` for this change: its ``revision`` moved on by a
    conditional update, which fails when another process changed it since it was read."""
    if Rollout.objects.filter(pk=rollout.pk, revision=rollout.revision).update(revision=F("revision") + 1) != 1:
        return False
    rollout.revision += 1
    return True


def _drift(rollout: Rollout) -> str:
    """How the model's labels or split differ from what the rollout set ("" when they do not)."""
    model = registry.model_get(rollout.model.name)
    labels = registry.label_numbers(model)
    wanted = {STABLE: rollout.stable_version, CANARY: rollout.canary_version}
    moved = [f"label '{k}' is on version {labels.get(k)}, not {v}" for k, v in wanted.items() if labels.get(k) != v]
    split = model.traffic or {}
    if split != _weights(rollout):
        moved.append(f"the split is {split or 'none'}, not {_weights(rollout)}")
    return "; ".join(moved)


# -- the judgement of a step ------------------------------------------------------
def tick(*, now: datetime | None = None) -> list[tuple[int, str]]:
    """Judge every running rollout whose step is due (at ``now``, default
    now); another process's rollout (locked or claimed) is left to it.
    Returns (rollout id, what happened) for each judged here."""
    now = now or timezone.now()
    done = []
    for pk in selectors.due(now):
        outcome = _judge(pk, now)
        if outcome:
            done.append((pk, outcome))
    return done


def _judge(pk: int, now: datetime) -> str:
    with transaction.atomic():
        rollout = (
            Rollout.objects.select_for_update(skip_locked=True)
            .select_related("model").filter(pk=pk, status=Status.RUNNING, judge_at__lte=now).first()
        )  # fmt: skip
        if rollout is None or not _claim(rollout):
            return ""
        drift = _drift(rollout)
        if drift:
            _pause(rollout, None, f"the routes were changed by hand: {drift}")
            return "paused"
        verdict, record = _analyse(rollout, now)
        rollout.analyses = [*rollout.analyses, record]
        if verdict == analysis.EXTEND:
            record["verdict"] = "extend"
            rollout.judge_at = now + timedelta(seconds=rollout.pause_seconds)
            rollout.save()
            return "extended"
        if verdict == analysis.FAIL:
            record["verdict"] = "rollback"
            _roll_back(rollout, None, Status.ROLLED_BACK, "; ".join(record["reasons"]), now)
            return "rolled_back"
        if rollout.step + 1 >= len(rollout.steps):
            record["verdict"] = "promote"
            _promote(rollout, None, "every step passed", now)
            return "promoted"
        record["verdict"] = "advance"
        try:
            _advance(rollout, now)
        except Refused as exc:
            _roll_back(rollout, None, Status.ROLLED_BACK, f"advancing was refused: {exc}", now)
            return "rolled_back"
        return "advanced"


def _analyse(rollout: Rollout, now: datetime) -> tuple[str, dict]:
    """The verdict on the current step and its record for ``analyses``."""
    baseline = rollout.baseline or {}
    minute = baseline.get("minute", int(rollout.step_started_at.timestamp() // 60))
    seen = analysis.totals(rollout.model.name, (rollout.canary_version, rollout.stable_version), minute)
    canary = analysis.numbers(
        rollout.canary_version, seen[rollout.canary_version].minus(analysis.Totals.from_json(baseline.get("canary")))
    )
    stable = analysis.numbers(
        rollout.stable_version, seen[rollout.stable_version].minus(analysis.Totals.from_json(baseline.get("stable")))
    )
    thresholds = analysis.Thresholds(
        rollout.max_error_rate, rollout.max_p99_ratio, rollout.p99_tolerance_ms, rollout.min_requests
    )
    verdict, reasons, ratio = analysis.judge(canary, stable, thresholds)
    record = {
        "step": rollout.step, "weight": rollout.weight, "at": now.isoformat(),
        "since": rollout.step_started_at.isoformat(), "canary": canary, "stable": stable, "p99_ratio": ratio,
        "result": verdict, "reasons": reasons,
    }  # fmt: skip
    return verdict, record


def _advance(rollout: Rollout, now: datetime) -> None:
    rollout.step += 1
    routes.traffic_set(model=rollout.model, weights=_weights(rollout), actor=None, force=rollout.force)
    _begin_step(rollout, now)
    rollout.save()
    audit.record(None, "rollout.advanced", rollout.model, rollout.canary_version, rollout=rollout.pk,
                 step=rollout.step, weight=rollout.weight)  # fmt: skip
    _event(rollout, "rollout.advanced", None)


def _end(rollout: Rollout, status: str, reason: str, now: datetime) -> None:
    rollout.status, rollout.reason, rollout.ended_at, rollout.judge_at = status, reason, now, None
    rollout.save()


def _promote(rollout: Rollout, actor, reason: str, now: datetime) -> None:
    """``stable`` moves to the canary's version and the split ends (when the
    default route would then break its callers, the split stays ``stable`` 100)."""
    routes.traffic_promote(model=rollout.model, actor=actor, force=rollout.force)
    try:
        with transaction.atomic():
            routes.traffic_set(model=rollout.model, weights={}, actor=actor)
    except Refused as exc:
        reason = f"{reason}; the split stays stable 100: {exc}"
    _end(rollout, Status.PROMOTED, reason, now)
    audit.record(actor, "rollout.promoted", rollout.model, rollout.canary_version, rollout=rollout.pk,
                 step=rollout.step, reason=reason)  # fmt: skip
    _event(rollout, "rollout.promoted", actor, reason=reason)


def _roll_back(rollout: Rollout, actor, status: str, reason: str, now: datetime) -> None:
    """Every unversioned request to ``stable`` again (``stable`` 100, ``canary`` 0)."""
    try:
        with transaction.atomic():
            routes.traffic_rollback(model=rollout.model, actor=actor)
    except Refused as exc:
        reason = f"{reason}; the split was left as it is: {exc}"
    _end(rollout, status, reason, now)
    action = "rollout.rolled_back" if status == Status.ROLLED_BACK else "rollout.aborted"
    audit.record(actor, action, rollout.model, rollout.canary_version, rollout=rollout.pk, step=rollout.step,
                 reason=reason)  # fmt: skip
    _event(rollout, "rollout.rolled_back", actor, reason=reason, aborted=status == Status.ABORTED)


def _pause(rollout: Rollout, actor, reason: str) -> None:
    rollout.status, rollout.reason, rollout.judge_at = Status.PAUSED, reason, None
    rollout.save()
    audit.record(actor, "rollout.paused", rollout.model, rollout.canary_version, rollout=rollout.pk,
                 step=rollout.step, reason=reason)  # fmt: skip


# -- what a person does -----------------------------------------------------------
def _take(rollout: Rollout, allowed: tuple[str, ...], what: str) -> Rollout:
    """``rollout`` fresh and claimed for this transaction (locked; waits for a
    judgement under way); Conflict when its status is not one of ``allowed``."""
    for _ in range(5):
        fresh = Rollout.objects.select_for_update().select_related("model").get(pk=rollout.pk)
        if fresh.status not in allowed:
            raise Conflict(f"rollout {fresh.pk} of '{fresh.model.name}' is {fresh.status}: it cannot be {what}")
        if _claim(fresh):
            return fresh
    raise Conflict(f"rollout {rollout.pk} keeps changing; try again")


@transaction.atomic
def rollout_pause(*, rollout: Rollout, actor) -> Rollout:
    """Pause a running rollout: its step is no longer judged. Audited ``rollout.paused``."""
    rollout = _take(rollout, (Status.RUNNING,), "paused")
    _pause(rollout, actor, "paused by hand")
    return rollout


@transaction.atomic
def rollout_resume(*, rollout: Rollout, actor) -> Rollout:
    """Resume a paused rollout: its step's labels and split are set again
    (when they were changed meanwhile) and the step starts over. Raises
    what the registry refuses (e.g. a label's version no longer READY).
    Audited ``rollout.resumed``."""
    rollout = _take(rollout, (Status.PAUSED,), "resumed")
    labels = registry.label_numbers(rollout.model)
    for label, number in ((STABLE, rollout.stable_version), (CANARY, rollout.canary_version)):
        if labels.get(label) != number:
            routes.label_set(model=rollout.model, name=label, number=number, actor=actor, force=rollout.force)
    if (registry.model_get(rollout.model.name).traffic or {}) != _weights(rollout):
        routes.traffic_set(model=rollout.model, weights=_weights(rollout), actor=actor, force=rollout.force)
    rollout.status, rollout.reason = Status.RUNNING, ""
    _begin_step(rollout, timezone.now())
    rollout.save()
    audit.record(actor, "rollout.resumed", rollout.model, rollout.canary_version, rollout=rollout.pk,
                 step=rollout.step, weight=rollout.weight)  # fmt: skip
    return rollout


@transaction.atomic
def rollout_promote(*, rollout: Rollout, actor) -> Rollout:
    """Promote now, whatever the step: ``stable`` moves to the canary's
    version and the split ends. Raises Conflict when label ``canary`` is no
    longer on the rollout's version. Audited ``rollout.promoted``."""
    rollout = _take(rollout, (Status.RUNNING, Status.PAUSED), "promoted")
    on = registry.label_numbers(rollout.model).get(CANARY)
    if on != rollout.canary_version:
        raise Conflict(f"label 'canary' is on version {on}, not the rollout's {rollout.canary_version}")
    _promote(rollout, actor, "promoted by hand", timezone.now())
    return rollout


@transaction.atomic
def rollout_abort(*, rollout: Rollout, actor) -> Rollout:
    """Abort: every unversioned request to ``stable`` again (``stable`` 100,
    ``canary`` 0), at once. Audited ``rollout.aborted``."""
    rollout = _take(rollout, (Status.RUNNING, Status.PAUSED), "aborted")
    _roll_back(rollout, actor, Status.ABORTED, "aborted by hand", timezone.now())
    return rollout
