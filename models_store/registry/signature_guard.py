"""The signature guard: a route keeps the signature its callers use.

A *route* is what a caller names: a version label (``stable``), or the
model alone (the default route: the traffic split's versions, else the
version policy's highest served version). Moving a label, setting a
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

from inference.serving_state import served_versions, traffic_routes


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


def optional_inputs(model) -> set[str]:
    """The inputs a RegisteredModel's config marks ``optional``."""
    return {t.get("name") for t in (model.config or {}).get("input", []) if t.get("optional")}


def default_route(model, versions: dict[int, object], labels: dict[str, int], traffic: dict | None = None,
                  policy: tuple | None = None) -> set[int]:  # fmt: skip
    """The version numbers the default route serves: the split's (with
    ``traffic``, the model's by default), else the policy's default version
    (``policy``: ``(version_policy, latest_versions, specific_versions)``,
    the model's by default). ``versions``: READY number -> version. The
    same rules as :mod:`inference.serving_state` (here for a split or
    policy not yet stored, whether the model is loaded or not)."""
    traffic = model.traffic or {} if traffic is None else traffic
    ready = list(versions)
    routes = traffic_routes(traffic, labels, ready)
    if routes:
        return {number for _label, number, _weight in routes}
    policy = policy or (model.version_policy, model.latest_versions, model.specific_versions)
    served = served_versions(policy[0], ready, policy[1], policy[2])
    return {served[0]} if served else set()


def check(model, route: str, before: Iterable, after: Iterable) -> list[str]:
    """The breaking changes, one sentence each, between every version in
    ``before`` (what ``route`` serves now) and every new one in ``after``;
    versions in both are not compared."""
    optional = optional_inputs(model)
    problems = []
    old = {v.number: v for v in before}
    for version in after:
        if version.number in old:
            continue
        for previous in old.values():
            for problem in breaking_changes(previous, version, optional):
                problems.append(f"{problem} (version {previous.number} -> {version.number})")
    return [f"{route}: {problem}" for problem in problems]


def against_default_route(model, version) -> dict | None:
    """How ``version`` differs from what the model's default route serves
    now (its highest version there), for the version page: ``{"against":
    number, "breaking": [...]}``, or None when ``version`` serves that route
    or nothing serves it (uses prefetched versions and labels when there are)."""
    ready = {v.number: v for v in model.versions.all() if v.state == "READY"}
    labels = {label.name: label.version.number for label in model.labels.all()}
    route = default_route(model, ready, labels)
    if not route or version.number in route:
        return None
    serving = ready[max(route)]
    return {"against": serving.number, "breaking": breaking_changes(serving, version, optional_inputs(model))}
