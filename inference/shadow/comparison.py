"""The comparison of a shadow version's outputs with the live answer's, per
output name, as sums that add up over requests, minutes and processes.

For one output, :meth:`OutputComparison.add` takes the live array and the
shadow's (numpy arrays of the output's datatype, any shape) and counts:

- ``compared``: requests whose output was compared;
- ``exact``: of them, bitwise-equal arrays (same dtype, shape and bytes; a
  NaN equals the same NaN);
- ``mismatched``: of them, arrays of another dtype or shape (nothing else
  is computed for them);
- ``elements``, ``abs_sum``, ``max_abs``: over every element of every
  numeric comparison of equal shape, the absolute differences
  ``|live - shadow|`` computed in float64 (an exact match adds its elements
  with difference 0), their sum and their maximum; ``nonfinite`` counts the
  elements whose difference is NaN or infinite, which are left out of the
  three;
- ``rows``, ``agree``: for a classifier's output (a 2-D floating-point array
  ``[batch, classes]`` with more than one class), the rows compared and
  those whose argmax (the first maximum, as :func:`numpy.argmax`) is the same.

BYTES (object) and other non-numeric outputs count ``compared``, ``exact``
and ``mismatched`` only. :meth:`OutputComparison.summary` gives the shares:
``exact_match_share`` = exact / compared, ``mean_abs_diff`` = abs_sum /
elements, ``max_abs_diff``, ``argmax_agreement`` = agree / rows (None when
nothing was counted).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import numpy as np

#: numpy kinds whose differences are computed: bool, signed and unsigned integers, floats.
NUMERIC_KINDS = frozenset("biuf")


@dataclass(slots=True)
class OutputComparison:
    """The comparisons of one output (see the module doc); plain sums, so
    that cells of several processes and minutes :meth:`merge`."""

    compared: int = 0
    exact: int = 0
    mismatched: int = 0
    elements: int = 0
    abs_sum: float = 0.0
    max_abs: float = 0.0
    nonfinite: int = 0
    rows: int = 0
    agree: int = 0

    def add(self, live: np.ndarray, shadow: np.ndarray) -> None:
        """Count one request's ``live`` and ``shadow`` arrays of this output (read only, never copied
        unless their dtype is not float64)."""
        self.compared += 1
        if live.dtype != shadow.dtype or live.shape != shadow.shape:
            self.mismatched += 1
            return
        if live.dtype.kind not in NUMERIC_KINDS:
            self.exact += bool(np.array_equal(live, shadow))
            return
        classifier = live.ndim == 2 and live.dtype.kind == "f" and live.shape[1] > 1
        if _bitwise_equal(live, shadow):
            self.exact += 1
            self.elements += live.size
            if classifier:
                self.rows += live.shape[0]
                self.agree += live.shape[0]
            return
        if live.size:
            with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: NaN, counted below
                difference = np.abs(live.astype(np.float64) - shadow.astype(np.float64))
            finite = np.isfinite(difference)
            if not finite.all():
                self.nonfinite += int(difference.size - np.count_nonzero(finite))
                difference = difference[finite]
            if difference.size:
                self.elements += difference.size
                self.abs_sum += float(difference.sum())
                self.max_abs = max(self.max_abs, float(difference.max()))
        if classifier and live.shape[0]:
            self.rows += live.shape[0]
            self.agree += int(np.count_nonzero(live.argmax(axis=1) == shadow.argmax(axis=1)))

    def merge(self, other: OutputComparison) -> OutputComparison:
        """Add ``other``'s counts into this one (the maximum of the maxima); returns self."""
        for name in _SUMS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.max_abs = max(self.max_abs, other.max_abs)
        return self

    def copy(self) -> OutputComparison:
        return OutputComparison(*(getattr(self, f) for f in _FIELDS))

    def as_dict(self) -> dict:
        """The counts as JSON (what the database keeps)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> OutputComparison:
        """Counts read back from :meth:`as_dict` (unknown keys ignored, missing ones 0)."""
        return cls(**{name: data[name] for name in _FIELDS if name in data})

    def summary(self) -> dict:
        """The shares a person reads: ``compared``, ``exact_matches``,
        ``exact_match_share`` (0..1), ``mismatched_shapes``, ``max_abs_diff``
        and ``mean_abs_diff`` (the output's units), ``nonfinite_diffs``,
        ``argmax_rows`` and ``argmax_agreement`` (0..1); a share is None
        when nothing was counted for it."""
        return {
            "compared": self.compared,
            "exact_matches": self.exact,
            "exact_match_share": self.exact / self.compared if self.compared else None,
            "mismatched_shapes": self.mismatched,
            "elements": self.elements,
            "max_abs_diff": self.max_abs if self.elements else None,
            "mean_abs_diff": self.abs_sum / self.elements if self.elements else None,
            "nonfinite_diffs": self.nonfinite,
            "argmax_rows": self.rows,
            "argmax_agreement": self.agree / self.rows if self.rows else None,
        }


_FIELDS = tuple(f.name for f in fields(OutputComparison))
_SUMS = tuple(name for name in _FIELDS if name != "max_abs")


def _bitwise_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays of one dtype and shape hold the same bytes (no copy when both are contiguous)."""
    if not a.size:
        return True
    if a.flags.c_contiguous and b.flags.c_contiguous:
        return memoryview(a).cast("B") == memoryview(b).cast("B")
    return a.tobytes() == b.tobytes()


def compare(live: dict[str, np.ndarray], shadow: dict[str, np.ndarray], into: dict[str, OutputComparison]) -> None:
    """Count one request: each output name in both ``live`` and ``shadow``
    (name -> array) into ``into`` (name -> comparison, made when missing)."""
    for name, array in live.items():
        other = shadow.get(name)
        if other is None or array is None:
            continue
        counts = into.get(name)
        if counts is None:
            counts = into[name] = OutputComparison()
        counts.add(array, other)
