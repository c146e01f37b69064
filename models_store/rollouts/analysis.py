"""The analysis of a rollout's step: the canary version against the stable
version over the step's window, from the per-minute rollups the serving
processes already keep (:mod:`inference.observability.rollups`, rows of
:class:`inference.models.MinuteRollupRow`).

The window: the rollups of the minutes from the step's first minute on,
less what those minutes had already counted when the step began (the
``baseline``, :func:`totals` read at the step's start), so that a step of a
few seconds is judged on its own requests, not on its minute's earlier
ones. Each process writes its open minutes every CHART_FLUSH_SECONDS (from
its statistics thread, every STATISTICS_FLUSH_SECONDS): a step is judged
:func:`settle_seconds` after its end, once every process has written it.

Per version: ``requests`` (answered and failed), ``errors``, the error rate
``errors / requests`` and the 99th percentile of the compute time in
milliseconds, from the summed histograms (:func:`inference.observability.rollups.percentile`).
The verdict (:func:`judge`): ``extend`` while the canary has fewer than
``min_requests`` requests; else ``fail`` when its error rate is above
``max_error_rate``, or when its p99 is above ``max_p99_ratio`` times the
stable version's and more than ``p99_tolerance_ms`` above it (judged only
when the stable version also had ``min_requests`` requests); else ``pass``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings

from inference.models import MinuteRollupRow
from inference.observability.rollups import add_histograms, percentile

PASS, FAIL, EXTEND = "pass", "fail", "extend"


@dataclass
class Totals:
    """A version's counts over a window: ``requests`` (answered and failed),
    ``errors``, and ``compute`` ({histogram bucket: answered requests}, ns buckets)."""

    requests: int = 0
    errors: int = 0
    compute: dict[int, int] = field(default_factory=dict)

    def minus(self, earlier: Totals) -> Totals:
        """What was counted after ``earlier`` (each count at least 0: a row
        folded away meanwhile cannot make one negative)."""
        compute = {b: n - earlier.compute.get(b, 0) for b, n in self.compute.items()}
        return Totals(
            max(0, self.requests - earlier.requests),
            max(0, self.errors - earlier.errors),
            {b: n for b, n in compute.items() if n > 0},
        )

    def as_json(self) -> dict:
        return {
            "requests": self.requests,
            "errors": self.errors,
            "compute": {str(b): n for b, n in self.compute.items()},
        }

    @classmethod
    def from_json(cls, data: dict | None) -> Totals:
        data = data or {}
        return cls(
            int(data.get("requests", 0)), int(data.get("errors", 0)), add_histograms({}, data.get("compute", {}))
        )


@dataclass(frozen=True)
class Thresholds:
    """When a canary fails a step (see the module doc)."""

    max_error_rate: float
    max_p99_ratio: float
    p99_tolerance_ms: float
    min_requests: int


def settle_seconds() -> float:
    """How long after a step's end its rollups are all in the database:
    one rollup write interval, one statistics flush, and a second to write."""
    return settings.CHART_FLUSH_SECONDS + settings.STATISTICS_FLUSH_SECONDS + 1.0


def totals(model_name: str, versions: tuple[int, ...], first_minute: int) -> dict[int, Totals]:
    """Per version of ``versions``: the rollups of ``model_name`` summed over
    every process, transport and minute from ``first_minute`` (whole minutes
    since the Unix epoch) on."""
    found = {version: Totals() for version in versions}
    rows = MinuteRollupRow.objects.filter(model_name=model_name, version__in=versions, minute__gte=first_minute)
    for version, successes, errors, compute in rows.values_list("version", "successes", "errors", "compute_histogram"):
        total = found[version]
        total.requests += successes + errors
        total.errors += errors
        add_histograms(total.compute, compute)
    return found


def numbers(version: int, window: Totals) -> dict:
    """What the analysis shows of one version: its number, ``requests``,
    ``errors``, ``error_rate`` (None without requests) and ``p99_ms`` (the
    compute time's; None without answered requests)."""
    p99 = percentile(window.compute, 99)
    return {
        "version": version,
        "requests": window.requests,
        "errors": window.errors,
        "error_rate": window.errors / window.requests if window.requests else None,
        "p99_ms": None if p99 is None else p99 / 1e6,
    }


def judge(canary: dict, stable: dict, thresholds: Thresholds) -> tuple[str, list[str], float | None]:
    """The verdict (:data:`PASS`, :data:`FAIL` or :data:`EXTEND`) on the
    canary's and the stable version's :func:`numbers`, the reasons (one
    sentence each) and the p99 ratio canary / stable (None when not judged)."""
    if canary["requests"] < thresholds.min_requests:
        return EXTEND, [f"the canary had {canary['requests']} requests, fewer than {thresholds.min_requests}"], None
    reasons = []
    if canary["error_rate"] > thresholds.max_error_rate:
        reasons.append(
            f"the canary's error rate {canary['error_rate']:.2%} ({canary['errors']} of {canary['requests']}) "
            f"is above {thresholds.max_error_rate:.2%}"
        )
    ratio = None
    if stable["requests"] >= thresholds.min_requests and canary["p99_ms"] and stable["p99_ms"]:
        ratio = canary["p99_ms"] / stable["p99_ms"]
        slower = canary["p99_ms"] - stable["p99_ms"]
        if ratio > thresholds.max_p99_ratio and slower > thresholds.p99_tolerance_ms:
            reasons.append(
                f"the canary's p99 {canary['p99_ms']:.3f} ms is {ratio:.2f}x the stable version's "
                f"{stable['p99_ms']:.3f} ms (at most {thresholds.max_p99_ratio:g}x, "
                f"or {thresholds.p99_tolerance_ms:g} ms more)"
            )
    return (FAIL if reasons else PASS), reasons, ratio
