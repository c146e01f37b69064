"""Two versions of one model side by side (the web UI's comparison page and
``GET /api/models/<m>/versions/compare?a=&b=``): their facts, signatures,
validation logs and traffic, and what breaks between them.

:func:`compare` answers a dict (JSON-able):

- ``a``, ``b``: each version's facts (number, state, held, serving, labels,
  platform, size in bytes, sha256, uploaded by and at, source, description,
  tags, the ONNX metadata ``properties`` or an ensemble's ``steps``);
- ``fields``: one row per fact, ``{"field", "a", "b", "same"}``;
- ``signature``: one row per input or output named by either version,
  ``{"kind", "name", "a", "b", "same"}`` (``a``/``b``: ``{"datatype",
  "shape"}``, null where that version lacks it);
- ``breaking``: why callers of ``a`` break on ``b`` (one sentence each,
  :func:`models_store.registry.signature_guard.breaking_changes`; [] :
  compatible), ``breaking_back`` the same from ``b`` to ``a``;
- ``validation``: ``{"a": [...], "b": [...]}``, the validation logs;
- ``traffic``: each version's requests, errors and compute latency over the
  charts' window (``range`` or ``from``/``to``:
  :func:`models_store.registry.charts.window`): ``times`` and per version
  ``requests``, ``errors`` (per step), ``compute_p50_ms``, ``compute_p99_ms``
  (milliseconds per step, null without traffic) and the totals.
"""

from __future__ import annotations

from models_store.registry import charts, selectors, signature_guard
from models_store.registry.models import ModelVersion, RegisteredModel

#: The facts compared, in the order shown.
FACTS = ("state", "held", "serving", "labels", "platform", "size", "sha256", "uploaded_by", "created_at", "source",
         "description", "tags")  # fmt: skip
#: The per-step series of ``traffic`` (from the charts' ``all`` series of a version).
TRAFFIC_SERIES = ("requests", "errors", "compute_p50_ms", "compute_p99_ms")


def facts(model: RegisteredModel, version: ModelVersion, serving: bool, labels: list[str]) -> dict:
    """What one version is, as :func:`compare` shows it."""
    found = {
        "number": version.number,
        "state": version.state,
        "held": version.held,
        "serving": serving,
        "labels": labels,
        "platform": version.platform,
        "size": None if (version.properties or {}).get("ensemble") else version.size,  # an ensemble has no file
        "sha256": version.sha256,
        "uploaded_by": version.uploaded_by.get_username() if version.uploaded_by else None,
        "created_at": version.created_at.isoformat(),
        "source": version.source,
        "description": version.description,
        "tags": dict(version.tags or {}),
    }
    plan = (version.properties or {}).get("ensemble")
    if plan:
        found["steps"] = [
            {"model": s["model_name"], "version": s["model_version"], "input_map": s.get("input_map", {}),
             "output_map": s.get("output_map", {})}
            for s in plan.get("steps", [])
        ]  # fmt: skip
    else:
        found["properties"] = {k: v for k, v in sorted((version.properties or {}).items()) if k != "config_sha256"}
    return found


def _fact_rows(a: dict, b: dict) -> list[dict]:
    rows = [{"field": key, "a": a[key], "b": b[key], "same": a[key] == b[key]} for key in FACTS]
    if "steps" in a or "steps" in b:
        steps = [" → ".join(f"{s['model']} v{s['version']}" for s in side.get("steps", [])) for side in (a, b)]
        rows.append({"field": "steps", "a": steps[0], "b": steps[1], "same": steps[0] == steps[1]})
    for key in sorted(set(a.get("properties", {})) | set(b.get("properties", {}))):
        values = [side.get("properties", {}).get(key) for side in (a, b)]
        rows.append({"field": f"property {key}", "a": values[0], "b": values[1], "same": values[0] == values[1]})
    return rows


def _tensor(tensor: dict | None) -> dict | None:
    return None if tensor is None else {"datatype": tensor["datatype"], "shape": list(tensor["shape"])}


def signature_rows(a: ModelVersion, b: ModelVersion) -> list[dict]:
    """One row per input, then per output, named by ``a`` or ``b`` (``a``'s order, then ``b``'s new names)."""
    rows = []
    for kind, left, right in (("input", a.inputs, b.inputs), ("output", a.outputs, b.outputs)):
        by_name = {t["name"]: t for t in right}
        names = [t["name"] for t in left] + [t["name"] for t in right if t["name"] not in {x["name"] for x in left}]
        mine = {t["name"]: t for t in left}
        for name in names:
            one, other = _tensor(mine.get(name)), _tensor(by_name.get(name))
            rows.append({"kind": kind, "name": name, "a": one, "b": other, "same": one == other})
    return rows


def traffic(model: RegisteredModel, numbers: tuple[int, int], params=None, now_s: float | None = None) -> dict:
    """Each version's traffic over the charts' window (see the module's docstring)."""
    out: dict = {}
    for side, number in zip(("a", "b"), numbers, strict=True):
        data = charts.model_charts(model.name, params=params or {}, now_s=now_s, version=number)
        everything = data["series"][-1]
        out.update({key: data[key] for key in ("range", "start", "end", "step_seconds", "times")})
        out[side] = {key: everything[key] for key in TRAFFIC_SERIES} | {
            "total_requests": everything["total_requests"],
            "total_errors": everything["total_errors"],
        }
    return out


def compare(model: RegisteredModel, a: int, b: int, params=None, now_s: float | None = None) -> dict:
    """Versions ``a`` and ``b`` of ``model`` (prefetched or not) side by side;
    KeyError naming a number the model has no version of; ValueError for a
    bad chart window in ``params`` (query parameters ``range``/``from``/``to``)."""
    versions = {v.number: v for v in model.versions.all()}
    for number in (a, b):
        if number not in versions:
            raise KeyError(f"model '{model.name}' has no version {number}")
    state = selectors.serving(model)
    labels = selectors.version_labels(model)
    one, two = versions[a], versions[b]
    sides = {
        side: facts(model, v, state.serves(v.number), labels.get(v.pk, [])) for side, v in (("a", one), ("b", two))
    }
    optional = selectors.optional_inputs(model)
    return {
        "model": model.name,
        **sides,
        "fields": _fact_rows(sides["a"], sides["b"]),
        "signature": signature_rows(one, two),
        "breaking": signature_guard.breaking_changes(one, two, optional),
        "breaking_back": signature_guard.breaking_changes(two, one, optional),
        "validation": {"a": list(one.log or []), "b": list(two.log or [])},
        "traffic": traffic(model, (a, b), params, now_s),
    }


def default_counterpart(model: RegisteredModel, number: int) -> int | None:
    """The version a version's page compares ``number`` with: the default
    version (what a request naming none gets) unless it is ``number``, else
    the highest other validated (READY or retired) version below it, else
    above it; None when the model has no other such version."""
    default = selectors.serving(model).default
    if default is not None and default != number:
        return default
    others = [v.number for v in model.versions.all() if v.number != number and v.state in ("READY", "UNAVAILABLE")]
    below = [n for n in others if n < number]
    return max(below) if below else (min(others) if others else None)


def version_diff(model, version) -> dict | None:
    """How ``version`` differs from another version, for its page:
    ``{"against", "breaking", "is_default"}`` (against the default version,
    :func:`signature_guard.against_default_route`; or, when ``version`` is
    what the default route serves, against :func:`default_counterpart`
    with ``is_default`` true); None when there is nothing to compare with."""
    if not version.inputs:
        return None
    compared = signature_guard.against_default_route(model, version)
    if compared is not None:
        return compared | {"is_default": False}
    number = default_counterpart(model, version.number)
    other = next((v for v in model.versions.all() if v.number == number), None)
    if other is None or not other.inputs:
        return None
    breaking = signature_guard.breaking_changes(other, version, selectors.optional_inputs(model))
    return {"against": number, "breaking": breaking, "is_default": selectors.serving(model).default == version.number}
