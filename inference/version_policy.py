"""Version policy: which versions of a model serve (Triton ``version_policy``).

Pure functions over version numbers. Policies apply to READY versions, so a
failed upload never takes the serving version offline.
"""

from __future__ import annotations

from collections.abc import Iterable


def served_versions(policy: str, ready: Iterable[int], latest: int = 1, specific: Iterable[int] = ()) -> list[int]:
    """The READY version numbers that ``policy`` serves, highest first.

    ``policy`` is ``latest`` (the ``latest`` highest), ``all``, or
    ``specific`` (those listed in ``specific``). Raises ValueError for an
    unknown policy or a ``latest`` count below 1.
    """
    numbers = sorted(set(ready), reverse=True)
    if policy == "latest":
        if latest < 1:
            raise ValueError("a latest policy serves at least 1 version")
        return numbers[:latest]
    if policy == "all":
        return numbers
    if policy == "specific":
        wanted = set(specific)
        return [n for n in numbers if n in wanted]
    raise ValueError(f"unknown version policy {policy!r}")


def default_version(policy: str, ready: Iterable[int], latest: int = 1, specific: Iterable[int] = ()) -> int | None:
    """The version served when a request names none: the highest served one."""
    served = served_versions(policy, ready, latest, specific)
    return served[0] if served else None
