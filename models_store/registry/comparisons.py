"""What the management API and the version page show of a model's shadow
traffic: its configuration, and the comparison of a shadow version's
answers with the live ones over the last hour, day or week, from the
per-minute rollups every server process writes
(:mod:`inference.shadow.rollups_db`; the arithmetic:
:mod:`inference.shadow.comparison`).

:func:`shadow_report` answers, for the range's steps (the charts' ranges:
``hour`` in 1-minute steps, ``day`` 5-minute, ``week`` 1-hour): the totals
(copies run, errors, dropped because the shadow queue was full, busy: not
run under load) and per output name the comparison (exact-match share,
max and mean absolute difference in the output's units, argmax agreement
of a classifier's rows), and the same per step (``series``) for the chart.
"""

from __future__ import annotations

import time

from inference.shadow import rollups_db
from models_store.registry import charts, selectors
from models_store.registry.models import RegisteredModel

#: The series the version page draws per output, per step.
SERIES = ("exact_match_share", "mean_abs_diff", "max_abs_diff", "argmax_agreement")


def shadow_config(model: RegisteredModel) -> dict | None:
    """``{"version", "percent", "serving"}`` of the model's shadow traffic
    (``serving``: the serving side runs the copies, i.e. the version is READY
    and the percent above 0); None without one."""
    if model.shadow_version_id is None:
        return None
    version = model.shadow_version
    return {
        "version": version.number,
        "percent": model.shadow_percent,
        "serving": selectors.serving(model).shadow == version.number,
    }


def shadow_report(model: RegisteredModel, version: int | None, range_name: str, now_s: float | None = None) -> dict:
    """The shadow traffic of ``model`` compared on ``version`` (None: the
    shadow version now, else the last one compared in the range; none: an
    empty report) over ``range_name`` (``hour``, ``day``, ``week``;
    ValueError otherwise), ending at ``now_s`` (default now)."""
    if range_name not in charts.RANGES:
        raise ValueError(f"unknown range '{range_name}': one of {', '.join(charts.RANGES)}")
    span, step = charts.RANGES[range_name]
    now_s = time.time() if now_s is None else now_s
    end = (int(now_s) // step + 1) * step
    start = end - span
    config = shadow_config(model)
    if version is None:
        compared = rollups_db.versions_compared(model.name, start // 60)
        version = config["version"] if config else next(iter(compared), None)
    report = {
        "model": model.name,
        "shadow": config,
        "version": version,
        "range": range_name,
        "step_seconds": step,
        "start": start,
        "end": end,
        "times": [start + i * step for i in range(span // step)],
    }
    if version is None:
        total, steps = rollups_db.ShadowTotals(), [rollups_db.ShadowTotals() for _ in report["times"]]
    else:
        total, steps = rollups_db.read(model.name, version, start // 60, end // 60, step // 60)
    report.update(_counts(total))
    report["outputs"] = {name: counts.summary() for name, counts in sorted(total.outputs.items())}
    report["series"] = {
        **{key: [getattr(s, key) for s in steps] for key in ("requests", "errors", "dropped", "busy")},
        "outputs": {
            name: {key: [_summary(s, name).get(key) for s in steps] for key in SERIES} for name in report["outputs"]
        },
    }
    return report


def _counts(total: rollups_db.ShadowTotals) -> dict:
    return {"requests": total.requests, "errors": total.errors, "dropped": total.dropped, "busy": total.busy}


def _summary(step: rollups_db.ShadowTotals, name: str) -> dict:
    counts = step.outputs.get(name)
    return counts.summary() if counts is not None else {}


def version_shadow(model: RegisteredModel, number: int, now_s: float | None = None) -> dict | None:
    """What the page of version ``number`` says of shadow traffic:
    ``{"current", "percent", "serving"}`` while it is the shadow version,
    ``{"current": False}`` when it was one within the last week; None otherwise."""
    config = shadow_config(model)
    if config is not None and config["version"] == number:
        return {"current": True, "percent": config["percent"], "serving": config["serving"]}
    now_s = time.time() if now_s is None else now_s
    week = charts.RANGES["week"][0]
    if number in rollups_db.versions_compared(model.name, int(now_s - week) // 60):
        return {"current": False}
    return None
