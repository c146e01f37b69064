"""The signature guard: a route keeps the signature its callers use.

A *route* is what a caller names: a version label (``stable``), or the
model alone (the default route: the traffic split's versions, else the
default version, both as :mod:`inference.serving.state` computes them for
the serving side, whether the model is loaded or not). Moving a label, setting a
traffic split or changing the version policy so that a route would serve a
version whose signature breaks what the route served is refused (409, the
differences named) unless the request says ``force`` (audited as forced).

Breaking, from the version a route serves now to the one it would serve:
an input removed or renamed (a rename is a removal and an addition), an
input added that the model's config does not mark ``optional``, a datatype
changed, a rank changed, a fixed dimension changed or a variable one (-1)
fixed, an output removed. Compatible: an optional input added, an output
added, a fixed dimension relaxed to -1.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from inference.ports import ModelRecord, VersionRecord
from inference.serving.state import ServingState, serving_state
from models_store.errors import SignatureConflict
from models_store.registry import selectors


def _shape_change(kind: str, name: str, before: list[int], after: list[int]) -> str | None:
    if len(before) != len(after):
        return f"{kind} '{name}' has {len(after)} dimensions, not {len(before)} ({before} -> {after})"
    for axis, (old, new) in enumerate(zip(before, after, strict=True)):
        if new == -1:
            continue  # relaxed, or still variable
        if old != new:
            what = "variable" if old == -1 else str(old)
            return f"{kind} '{name}' dimension {axis} is {new}, not {what} ({before} -> {after})"
    return None


def breaking_changes(before, after, optional_inputs: Iterable[str] = ()) -> list[str]:
    """Why callers of version ``before`` break on version ``after`` (both
    with ``inputs`` and ``outputs``: lists of ``{"name", "datatype",
    "shape"}``, as stored for a model version); [] when compatible.
    ``optional_inputs``: names the model's config marks optional."""
    optional = set(optional_inputs)
    problems = []
    for kind, old_list, new_list in (
        ("input", before.inputs, after.inputs),
        ("output", before.outputs, after.outputs),
    ):
        old = {t["name"]: t for t in old_list}
        new = {t["name"]: t for t in new_list}
        for name, tensor in old.items():
            other = new.get(name)
            if other is None:
                problems.append(f"{kind} '{name}' removed")
                continue
            if other["datatype"] != tensor["datatype"]:
                problems.append(f"{kind} '{name}' is {other['datatype']}, not {tensor['datatype']}")
            change = _shape_change(kind, name, list(tensor["shape"]), list(other["shape"]))
            if change:
                problems.append(change)
        if kind == "input":
            for name in sorted(set(new) - set(old)):
                if name not in optional:
                    problems.append(f"input '{name}' added and required")
    return problems


def route_state(record: ModelRecord) -> ServingState:
    """The serving state of ``record`` as its routes see it: loaded or not
    (the guard also keeps an unloaded model's callers)."""
    return serving_state(replace(record, loaded=True))


def default_route(record: ModelRecord) -> set[int]:
    """The version numbers the default route of ``record`` serves: the
    traffic split's routes, else the default version, as
    :func:`inference.serving.state.serving_state` computes them (loaded or not)."""
    state = route_state(record)
    if state.routes:
        return {number for _label, number, _weight in state.routes}
    return {state.default} if state.default is not None else set()


def check(model, route: str, before: Iterable, after: Iterable) -> list[str]:
    """The breaking changes, one sentence each, between every version in
    ``before`` (what ``route`` serves now) and every new one in ``after``
    (versions or version records); versions in both are not compared."""
    optional = selectors.optional_inputs(model)
    problems = []
    old = {v.number: v for v in before}
    for version in after:
        if version.number in old:
            continue
        for previous in old.values():
            for problem in breaking_changes(previous, version, optional):
                problems.append(f"{problem} (version {previous.number} -> {version.number})")
    return [f"{route}: {problem}" for problem in problems]


def guard(model, *, what: str, route: str, before: Iterable, after: Iterable, force: bool) -> dict:
    """Raise SignatureConflict (naming ``what``) unless the versions ``after``
    keep the signature of ``before`` for ``route``'s callers, or ``force``;
    the audit detail to add ({"forced": True, "differences": [...]} when
    forced past them, else {})."""
    differences = check(model, route, before, after)
    if not differences:
        return {}
    if not force:
        raise SignatureConflict(what, differences)
    return {"forced": True, "differences": differences}


def _default_versions(record: ModelRecord) -> list:
    versions = {v.number: v for v in record.versions}
    return [versions[n] for n in sorted(default_route(record))]


def guard_default_route(
    model, *, what: str, force: bool, traffic: dict | None = None, policy=None, without: int | None = None
) -> dict:
    """:func:`guard` for the default route of ``model``, before and after a
    change of its traffic split (``traffic``), its version policy
    (``policy``: ``(version_policy, latest_versions, specific_versions)``)
    or the removal of version ``without`` (retired or deleted)."""
    record = selectors.model_record(model)
    changed = record
    if traffic is not None:
        changed = replace(changed, traffic=traffic)
    if policy is not None:
        changed = replace(
            changed, version_policy=policy[0], latest_versions=policy[1], specific_versions=tuple(policy[2])
        )
    if without is not None:
        changed = replace(changed, versions=tuple(v for v in record.versions if v.number != without))
    before, after = _default_versions(record), _default_versions(changed)
    return guard(model, what=what, route="the default route", before=before, after=after, force=force)


def breaks_default_route(model, *, number: int, inputs: list, outputs: list) -> list[str]:
    """The breaking changes (one sentence each; [] : none) that the callers
    of ``model``'s default route would meet if version ``number``, with this
    signature, were READY and chosen by the version policy, against what
    that route serves now without it. The state machine holds a version
    for which this is not empty (:mod:`models_store.registry.services.states`)."""
    record = selectors.model_record(model)
    others = tuple(v for v in record.versions if v.number != number)
    candidate = VersionRecord(
        number=number, state="READY", reason="", sha256="", artifact="", size=0, inputs=inputs, outputs=outputs
    )
    before = _default_versions(replace(record, versions=others))
    after = _default_versions(replace(record, versions=(*others, candidate)))
    return check(model, "the default route", before, after)


def against_default_route(model, version) -> dict | None:
    """How ``version`` differs from the default version of ``model`` (the
    one a request naming no version gets: :func:`default_route`), for the
    version page: ``{"against": number, "breaking": [...]}``, or None when
    ``version`` serves the default route or nothing serves it (uses
    prefetched versions and labels when there are)."""
    record = selectors.model_record(model)
    default = route_state(record).default
    if default is None or version.number in default_route(record):
        return None
    serving = next(v for v in record.versions if v.number == default)
    return {"against": default, "breaking": breaking_changes(serving, version, selectors.optional_inputs(model))}
